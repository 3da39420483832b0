package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/batches"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/web"
)

// JobQueue is the job queue as the /v1 routes and the pages use it: jobs
// queued, read and cancelled one by one, and a batch's lines.
type JobQueue interface {
	web.JobReader
	batches.Queue
	Enqueue(ctx context.Context, p *completion.Pipeline, caller accounts.Caller, body []byte, priority, callbackURL string) (jobs.Job, error)
	Cancel(ctx context.Context, orgID int64, id string) (jobs.Job, error)
}

// Callbacks vets a job's callback URL for an organization.
type Callbacks interface {
	CheckCallback(ctx context.Context, orgID int64, url string) error
}

// asyncHeader queues a chat completion sent to /v1/chat/completions as a job.
const asyncHeader = "X-Sluice-Async"

// callbackHeader names a job's callback URL.
const callbackHeader = "X-Sluice-Callback-URL"

type jobOut struct {
	ID          string          `json:"id"`
	Object      string          `json:"object"`
	Status      string          `json:"status"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`
	CreatedAt   int64           `json:"created_at"`
	StartedAt   *int64          `json:"started_at"`
	FinishedAt  *int64          `json:"finished_at"`
	Result      json.RawMessage `json:"result,omitempty"` // the chat completion, once succeeded
	Error       *jobs.Failure   `json:"error,omitempty"`
	Callback    *callbackOut    `json:"callback,omitempty"` // only for a job with a callback URL
}

// callbackOut is a job's callback delivery.
type callbackOut struct {
	URL         string `json:"url"` // its query hidden: it may carry a secret
	Status      string `json:"status"`
	Attempts    int    `json:"attempts"`
	LastError   string `json:"last_error,omitempty"`
	DeliveredAt *int64 `json:"delivered_at"`
}

func unix(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	u := t.Unix()
	return &u
}

func toJobOut(j jobs.Job) jobOut {
	out := jobOut{ID: j.ID, Object: "job", Status: j.Status, Attempts: j.Attempts, MaxAttempts: j.MaxAttempts,
		CreatedAt: j.CreatedAt.Unix(), StartedAt: unix(j.StartedAt), FinishedAt: unix(j.FinishedAt)}
	if o := j.Output; o != nil {
		out.Error = o.Error
		if j.Status == jobs.Succeeded {
			out.Result = o.Body
		}
	}
	if c := j.Callback; c != nil {
		out.Callback = &callbackOut{URL: c.URL, Status: c.Status, Attempts: c.Attempts, LastError: c.LastError, DeliveredAt: unix(c.DeliveredAt)}
	}
	return out
}

// createJob answers POST /v1/jobs (and /v1/chat/completions with
// X-Sluice-Async: true): the body is a chat completion, checked now and
// worked later; "callback_url" in it (or X-Sluice-Callback-URL) is told the
// outcome. Queueing costs one request from the organization's bucket, as
// any call does (the job pays its completion when it runs), and a place
// in its queue of jobs; a frozen token cannot queue.
func (a *api) createJob(c *gin.Context) {
	ctx, caller := c.Request.Context(), callerOf(c)
	if err := a.Pipeline.Admit(ctx, caller, requestID(c), httpSink{c}); err != nil {
		a.fail(c, err)
		return
	}
	body, err := a.readBody(c)
	if err != nil {
		a.fail(c, err)
		return
	}
	callback := c.GetHeader(callbackHeader)
	if body, callback, err = withoutCallback(body, callback); err != nil {
		a.fail(c, err)
		return
	}
	if callback != "" {
		if err := a.Callbacks.CheckCallback(ctx, caller.OrgID, callback); err != nil {
			a.fail(c, err)
			return
		}
	}
	j, err := a.Jobs.Enqueue(ctx, a.Pipeline, caller, body, c.GetHeader("X-Sluice-Priority"), callback)
	if err != nil {
		a.fail(c, err)
		return
	}
	c.Header("Location", "/v1/jobs/"+j.ID)
	c.JSON(http.StatusAccepted, toJobOut(j))
}

// withoutCallback takes "callback_url" out of a job's body (a provider
// would not know it); the header, if any, wins.
func withoutCallback(body []byte, header string) ([]byte, string, error) {
	if !bytes.Contains(body, []byte(`"callback_url"`)) {
		return body, header, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body, header, nil // the parse that follows says what is wrong
	}
	var url string
	if raw, ok := m["callback_url"]; ok {
		if err := json.Unmarshal(raw, &url); err != nil {
			return nil, "", apperr.Field(apperr.Invalid, "invalid_callback_url", "callback_url", "callback_url must be a string")
		}
		delete(m, "callback_url")
	}
	if header == "" {
		header = url
	}
	b, err := json.Marshal(m)
	return b, header, err
}

// getJob answers GET /v1/jobs/{id}.
func (a *api) getJob(c *gin.Context) {
	j, err := a.Jobs.Get(c.Request.Context(), callerOf(c).OrgID, c.Param("id"))
	if err != nil {
		a.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, toJobOut(j))
}

// cancelJob answers DELETE /v1/jobs/{id}: a queued job is cancelled.
func (a *api) cancelJob(c *gin.Context) {
	j, err := a.Jobs.Cancel(c.Request.Context(), callerOf(c).OrgID, c.Param("id"))
	if err != nil {
		a.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, toJobOut(j))
}

// listJobs answers GET /v1/jobs: the organization's latest 100 jobs.
func (a *api) listJobs(c *gin.Context) {
	js, err := a.Jobs.List(c.Request.Context(), callerOf(c).OrgID, 100)
	if err != nil {
		a.fail(c, err)
		return
	}
	out := make([]jobOut, len(js))
	for i, j := range js {
		out[i] = toJobOut(j)
	}
	c.JSON(http.StatusOK, gin.H{"object": "list", "data": out})
}
