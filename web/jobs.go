package web

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/batches"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/templates"
)

// JobReader is what the pages read of the job queue: an organization's
// jobs for the dashboard, and the queue's depth for the admin console.
type JobReader interface {
	List(ctx context.Context, orgID int64, limit int) ([]jobs.Job, error)
	Get(ctx context.Context, orgID int64, id string) (jobs.Job, error)
	Stats(ctx context.Context) (jobs.Stats, error)
}

// BatchReader is what the dashboard reads of the Batch API: an
// organization's batches and the files to download.
type BatchReader interface {
	List(ctx context.Context, orgID int64, after string, limit int) ([]models.Batch, bool, error)
	FileContent(ctx context.Context, orgID int64, id string) (models.BatchFile, io.Reader, error)
}

// How much of the queued work the dashboard shows.
const (
	dashboardJobSample = 100 // the latest jobs counted by status
	dashboardJobs      = 10  // of them listed
	dashboardBatches   = 10
)

// jobsView is the dashboard's jobs and batches section for orgID.
func (p *Pages) jobsView(ctx context.Context, orgID int64) (*templates.JobsView, error) {
	js, err := p.jobs.List(ctx, orgID, dashboardJobSample)
	if err != nil {
		return nil, err
	}
	bs, _, err := p.batches.List(ctx, orgID, "", dashboardBatches)
	if err != nil {
		return nil, err
	}
	v := &templates.JobsView{Sampled: len(js)}
	for i, j := range js {
		switch j.Status {
		case jobs.Queued:
			v.Queued++
		case jobs.Running:
			v.Running++
		case jobs.Succeeded:
			v.Succeeded++
		case jobs.Failed:
			v.Failed++
		case jobs.Cancelled:
			v.Cancelled++
		}
		if i < dashboardJobs {
			v.Jobs = append(v.Jobs, jobRow(j))
		}
	}
	for _, b := range bs {
		v.Batches = append(v.Batches, batchRow(b))
	}
	return v, nil
}

func jobRow(j jobs.Job) templates.JobRow {
	r := templates.JobRow{ID: j.ID, Status: j.Status, Created: formatTime(j.CreatedAt), Finished: formatOptionalTime(j.FinishedAt, "")}
	if j.Attempts > 0 {
		r.Attempts = fmt.Sprintf("%d of %d", j.Attempts, j.MaxAttempts)
	}
	if o := j.Output; o != nil {
		if j.Status == jobs.Succeeded && len(o.Body) > 0 {
			r.ResultURL = "/jobs/" + j.ID + "/result"
		}
		if o.Error != nil && j.Status != jobs.Succeeded {
			r.Error = o.Error.Code + ": " + o.Error.Message
		}
	}
	if c := j.Callback; c != nil {
		r.Callback = &templates.CallbackRow{URL: c.URL, Status: c.Status, Attempts: c.Attempts, LastError: c.LastError,
			Delivered: formatOptionalTime(c.DeliveredAt, "")}
	}
	return r
}

func batchRow(b models.Batch) templates.BatchRow {
	r := templates.BatchRow{ID: batches.ID(b.ID), Status: b.Status, Created: formatTime(b.CreatedAt), Total: b.Total,
		Completed: b.Completed, Failed: b.Failed, InputURL: fileURL(b.InputFileID)}
	for _, t := range []*time.Time{b.CompletedAt, b.CancelledAt, b.ExpiredAt, b.FailedAt} {
		if t != nil {
			r.Finished = formatTime(*t)
		}
	}
	if models.BatchOpen(b.Status) {
		r.Ends = formatTime(b.ExpiresAt)
	}
	if b.OutputFileID != nil {
		r.OutputURL = fileURL(*b.OutputFileID)
	}
	if b.ErrorFileID != nil {
		r.ErrorURL = fileURL(*b.ErrorFileID)
	}
	return r
}

func fileURL(id int64) string { return "/files/" + batches.FileID(id) }

// DownloadFile downloads one of the organization's batch files (an input,
// or a batch's output or error file); another organization's, or one that
// expired, is not found.
func (p *Pages) DownloadFile(c *gin.Context) {
	const missing = "No such file: it may have expired, or belong to another organization."
	u, _ := userOf(c)
	f, content, err := p.batches.FileContent(c.Request.Context(), u.OrgID, c.Param("id"))
	if err != nil {
		if apperr.CodeOf(err) == apperr.NotFound {
			err = apperr.New(apperr.NotFound, missing)
		}
		p.fail(c, err)
		return
	}
	// Streamed a chunk at a time; its length is known from the start.
	c.DataFromReader(http.StatusOK, f.Bytes, "application/jsonl", content, map[string]string{
		"Content-Disposition": mime.FormatMediaType("attachment", map[string]string{"filename": f.Filename}), "Cache-Control": "no-store"})
}

// JobResult downloads a succeeded job's chat completion as JSON.
func (p *Pages) JobResult(c *gin.Context) {
	const missing = "No such job result: the job may not have succeeded, may have expired, or belong to another organization."
	u, _ := userOf(c)
	j, err := p.jobs.Get(c.Request.Context(), u.OrgID, c.Param("id"))
	if err == nil && (j.Status != jobs.Succeeded || j.Output == nil || len(j.Output.Body) == 0) {
		err = apperr.New(apperr.NotFound, missing)
	}
	if err != nil {
		if apperr.CodeOf(err) == apperr.NotFound {
			err = apperr.New(apperr.NotFound, missing)
		}
		p.fail(c, err)
		return
	}
	c.Header("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": j.ID + ".json"}))
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusOK, "application/json", j.Output.Body)
}

// adminQueue is the queue panel of the admin console. A queue that cannot
// be read, or not within the pages' queueWait, says so rather than failing
// or holding up the page.
func (p *Pages) adminQueue(ctx context.Context) *templates.AdminQueueView {
	ctx, cancel := context.WithTimeout(ctx, p.queueWait)
	defer cancel()
	s, err := p.jobs.Stats(ctx)
	if err != nil {
		p.log.Warn("reading the job queue's stats failed", "err", err)
		return &templates.AdminQueueView{Error: true}
	}
	v := &templates.AdminQueueView{Waiting: s.Waiting}
	if s.Waiting > 0 {
		v.Oldest = ageText(s.Oldest)
	}
	return v
}

// ageText writes a wait for people: "45s", "3m 12s", "2h 5m", "3d 4h".
func ageText(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return strconv.FormatInt(s, 10) + "s"
	case s < 3600:
		return fmt.Sprintf("%dm %ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh %dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd %dh", s/86400, s%86400/3600)
}
