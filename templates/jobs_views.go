package templates

import (
	"strconv"
	"strings"
)

// JobsView is the dashboard's queued work: how the latest jobs stand, how
// far each batch got and what failed, with the downloads of results,
// output and error files.
type JobsView struct {
	// Counts of the latest Sampled jobs by status.
	Queued, Running, Succeeded, Failed, Cancelled int
	Sampled                                       int
	Jobs                                          []JobRow   // the latest few
	Batches                                       []BatchRow // the latest few
}

// Empty says there is nothing to show yet.
func (v JobsView) Empty() bool { return len(v.Jobs) == 0 && len(v.Batches) == 0 }

// JobRow is one job as its owner sees it.
type JobRow struct {
	ID        string
	Status    string // queued, running, succeeded, failed, cancelled
	Created   string
	Finished  string // "" while it has not
	Attempts  string // e.g. "1 of 5"; "" before the first
	Error     string // why it failed, e.g. "insufficient_quota: …"
	ResultURL string // the completion's download; "" without one
	Callback  *CallbackRow
}

// CallbackRow is a job's callback delivery.
type CallbackRow struct {
	URL       string // its query hidden
	Status    string // pending, delivered, failed
	Attempts  int
	LastError string // "" without one
	Delivered string // when, "" until then
}

// BatchRow is one batch: its lines' progress and its files.
type BatchRow struct {
	ID        string
	Status    string // OpenAI's: in_progress, cancelling, completed, expired, cancelled, failed…
	Created   string
	Ends      string // when its window ends, while it runs
	Finished  string // "" while it runs
	Total     int
	Completed int // answered 2xx
	Failed    int // every other finished line
	InputURL  string
	OutputURL string // "" until there is an output file
	ErrorURL  string // "" until there is an error file
}

// Done is how many lines have finished.
func (b BatchRow) Done() int { return b.Completed + b.Failed }

// meterWidth is the share of total that n is, as an SVG width out of 100.
func meterWidth(n, total int) string {
	if total <= 0 {
		return "0"
	}
	return strconv.FormatFloat(100*float64(n)/float64(total), 'f', 2, 64)
}

// percentDone writes the share of lines done, e.g. "42%".
func percentDone(b BatchRow) string {
	if b.Total == 0 {
		return "0%"
	}
	return strconv.Itoa(b.Done()*100/b.Total) + "%"
}

// jobStatusClass picks a badge style for a job's or a batch's status.
func jobStatusClass(status string) string {
	switch status {
	case "succeeded", "completed":
		return "badge-active"
	case "failed", "expired":
		return "badge-revoked"
	case "cancelling", "cancelled":
		return "badge-expired"
	case "queued", "running", "in_progress", "validating", "finalizing":
		return "badge-freeze-lifted"
	default:
		return "badge-neutral"
	}
}

// statusWords writes an API status for people: "in_progress" → "in progress".
func statusWords(s string) string { return strings.ReplaceAll(s, "_", " ") }

// AdminQueueView is the job queue as the admin console shows it: jobs
// (and batch lines) of every organization waiting to run, and how long
// the oldest has waited.
type AdminQueueView struct {
	Waiting int64
	Oldest  string // e.g. "3m 12s"; "" when none waits
	Error   bool   // the queue could not be read
}

// callbackStatusClass picks a badge style for a callback's delivery.
func callbackStatusClass(status string) string {
	switch status {
	case "delivered":
		return "badge-active"
	case "failed":
		return "badge-revoked"
	case "pending":
		return "badge-freeze-lifted"
	default:
		return "badge-neutral"
	}
}
