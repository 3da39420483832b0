package handlers

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/batches"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/models"
)

// OpenAI's Batch API: files (POST /v1/files and the rest) and batches, in
// the shapes the official SDKs read. Uploading costs one request from the
// token's bucket, as other API calls do; creating, reading and polling
// batches costs nothing (their lines pay when they run, like jobs), so a
// client may poll without a 429.

type fileOut struct {
	ID            string  `json:"id"`
	Object        string  `json:"object"`
	Bytes         int64   `json:"bytes"`
	CreatedAt     int64   `json:"created_at"`
	ExpiresAt     int64   `json:"expires_at"`
	Filename      string  `json:"filename"`
	Purpose       string  `json:"purpose"`
	Status        string  `json:"status"`
	StatusDetails *string `json:"status_details"`
}

func toFileOut(f models.BatchFile) fileOut {
	return fileOut{ID: batches.FileID(f.ID), Object: "file", Bytes: f.Bytes, CreatedAt: f.CreatedAt.Unix(), ExpiresAt: f.ExpiresAt.Unix(),
		Filename: f.Filename, Purpose: f.Purpose, Status: "processed"}
}

// uploadFile answers POST /v1/files: multipart/form-data with purpose
// (batch) and file, at most the tier's batch file size; the file is stored
// a chunk at a time as it arrives, refused as soon as it passes the limit,
// and seen only once the whole body was read (and a signed one verified).
func (a *api) uploadFile(c *gin.Context) {
	caller := callerOf(c)
	if mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type")); err != nil || mt != "multipart/form-data" {
		a.fail(c, apperr.Field(apperr.Invalid, "invalid_content_type", "", "Content-Type must be multipart/form-data with the fields purpose and file"))
		return
	}
	// The file, and room for the other fields and the multipart framing.
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, uploadBody(caller))
	mr, err := c.Request.MultipartReader()
	if err != nil {
		a.fail(c, apperr.Field(apperr.Invalid, "invalid_body", "", "the request body is not multipart/form-data"))
		return
	}
	var purpose string
	var expiresAfter time.Duration
	var up *batches.FileUpload
	// Whatever was stored of a refused upload is deleted.
	defer func() {
		if up != nil {
			up.Abort()
		}
	}()
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			a.fail(c, uploadError(err, caller))
			return
		}
		switch part.FormName() {
		case "file":
			if up != nil { // a second file part: the last one is the file
				up.Abort()
			}
			if up, err = a.Batches.BeginUpload(c.Request.Context(), caller, part.FileName()); err == nil {
				_, err = io.Copy(up, part)
			}
		case "purpose":
			purpose, err = formValue(part)
		case "expires_after[seconds]":
			var v string
			if v, err = formValue(part); err == nil {
				secs, perr := strconv.ParseInt(v, 10, 64)
				if perr != nil || secs <= 0 {
					err = apperr.Field(apperr.Invalid, "invalid_expires_after", "expires_after", "expires_after[seconds] must be a whole number of seconds")
				}
				expiresAfter = time.Duration(secs) * time.Second
			}
		default: // expires_after[anchor] (created_at, the only one) and anything else
			_, err = io.Copy(io.Discard, part)
		}
		part.Close()
		if err != nil {
			a.fail(c, uploadError(err, caller))
			return
		}
	}
	if up == nil {
		a.fail(c, apperr.Field(apperr.Invalid, "missing_file", "file", "file is required: the JSON Lines file of requests"))
		return
	}
	// A signed upload's signature covers the whole body, read by now, and
	// is checked before the file is committed.
	if err := a.signatureVerified(c); err != nil {
		a.fail(c, uploadError(err, caller))
		return
	}
	f, err := up.Commit(purpose, expiresAfter)
	if err != nil {
		a.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, toFileOut(f))
}

// formValue reads a small multipart field.
func formValue(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, 1<<10))
	return strings.TrimSpace(string(b)), err
}

// uploadError says why an upload could not be read: a body past the limit
// is the file's size, anything else a malformed body.
func uploadError(err error, caller accounts.Caller) error {
	var tooBig *http.MaxBytesError
	var known *apperr.Error
	switch {
	case errors.As(err, &tooBig):
		return batches.TooLarge(caller)
	case errors.As(err, &known):
		return err
	}
	return apperr.Field(apperr.Invalid, "invalid_body", "", "the multipart body could not be read")
}

// listFiles answers GET /v1/files: the organization's files, newest first
// (order=asc for oldest), optionally of one purpose, after a file id.
func (a *api) listFiles(c *gin.Context) {
	limit, err := queryLimit(c)
	if err != nil {
		a.fail(c, err)
		return
	}
	fs, more, err := a.Batches.Files(c.Request.Context(), callerOf(c).OrgID,
		batches.FileList{Purpose: c.Query("purpose"), After: c.Query("after"), Limit: limit, Order: c.Query("order")})
	if err != nil {
		a.fail(c, err)
		return
	}
	out := make([]fileOut, len(fs))
	for i, f := range fs {
		out[i] = toFileOut(f)
	}
	page := gin.H{"object": "list", "data": out, "has_more": more, "first_id": nil, "last_id": nil}
	if len(out) > 0 {
		page["first_id"], page["last_id"] = out[0].ID, out[len(out)-1].ID
	}
	c.JSON(http.StatusOK, page)
}

// queryLimit reads ?limit=; 0 when absent.
func queryLimit(c *gin.Context) (int, error) {
	v := c.Query("limit")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, apperr.Field(apperr.Invalid, "invalid_limit", "limit", "limit must be a positive whole number")
	}
	return n, nil
}

// getFile answers GET /v1/files/{id}.
func (a *api) getFile(c *gin.Context) {
	f, err := a.Batches.File(c.Request.Context(), callerOf(c).OrgID, c.Param("id"))
	if err != nil {
		a.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, toFileOut(f))
}

// fileContent answers GET /v1/files/{id}/content with the file's bytes.
func (a *api) fileContent(c *gin.Context) {
	f, content, err := a.Batches.FileContent(c.Request.Context(), callerOf(c).OrgID, c.Param("id"))
	if err != nil {
		a.fail(c, err)
		return
	}
	// Streamed a chunk at a time, its length known from the start. A read
	// that fails midway (the file deleted meanwhile) cuts the answer short
	// of its Content-Length, which the client sees as a failed download.
	c.DataFromReader(http.StatusOK, f.Bytes, "application/jsonl", readLogged{content, a, c},
		map[string]string{"Content-Disposition": mime.FormatMediaType("attachment", map[string]string{"filename": f.Filename})})
}

// readLogged is a download's content that logs why a read failed.
type readLogged struct {
	r io.Reader
	a *api
	c *gin.Context
}

func (r readLogged) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.a.log.Warn("a file download was cut short", "request_id", requestID(r.c), "err", err)
	}
	return n, err
}

// deleteFile answers DELETE /v1/files/{id}.
func (a *api) deleteFile(c *gin.Context) {
	id := c.Param("id")
	if err := a.Batches.DeleteFile(c.Request.Context(), callerOf(c).OrgID, id); err != nil {
		a.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"id": id, "object": "file", "deleted": true})
}

type batchCounts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

type batchErrors struct {
	Object string         `json:"object"`
	Data   []jobs.Failure `json:"data"`
}

type batchOut struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Errors           *batchErrors      `json:"errors"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           string            `json:"status"`
	OutputFileID     *string           `json:"output_file_id"`
	ErrorFileID      *string           `json:"error_file_id"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     *int64            `json:"in_progress_at"`
	ExpiresAt        int64             `json:"expires_at"`
	FinalizingAt     *int64            `json:"finalizing_at"`
	CompletedAt      *int64            `json:"completed_at"`
	FailedAt         *int64            `json:"failed_at"`
	ExpiredAt        *int64            `json:"expired_at"`
	CancellingAt     *int64            `json:"cancelling_at"`
	CancelledAt      *int64            `json:"cancelled_at"`
	RequestCounts    batchCounts       `json:"request_counts"`
	Metadata         map[string]string `json:"metadata"`
}

func fileRef(id *int64) *string {
	if id == nil {
		return nil
	}
	s := batches.FileID(*id)
	return &s
}

func toBatchOut(b models.Batch) batchOut {
	out := batchOut{ID: batches.ID(b.ID), Object: "batch", Endpoint: b.Endpoint, InputFileID: batches.FileID(b.InputFileID),
		CompletionWindow: b.CompletionWindow, Status: b.Status, OutputFileID: fileRef(b.OutputFileID), ErrorFileID: fileRef(b.ErrorFileID),
		CreatedAt: b.CreatedAt.Unix(), InProgressAt: unix(b.InProgressAt), ExpiresAt: b.ExpiresAt.Unix(), FinalizingAt: unix(b.FinalizingAt),
		CompletedAt: unix(b.CompletedAt), FailedAt: unix(b.FailedAt), ExpiredAt: unix(b.ExpiredAt), CancellingAt: unix(b.CancellingAt),
		CancelledAt: unix(b.CancelledAt), RequestCounts: batchCounts{b.Total, b.Completed, b.Failed}}
	if b.Metadata != "" {
		_ = json.Unmarshal([]byte(b.Metadata), &out.Metadata)
	}
	if b.Errors != "" {
		out.Errors = &batchErrors{Object: "list"}
		_ = json.Unmarshal([]byte(b.Errors), &out.Errors.Data)
	}
	return out
}

// createBatch answers POST /v1/batches: a batch of an uploaded file's
// requests, queued at once; malformed lines fail alone (the error file
// says why). Admitted by admit (a frozen token cannot create one); its
// pending lines take places of the organization's.
func (a *api) createBatch(c *gin.Context) {
	caller := callerOf(c)
	body, err := a.readBody(c)
	if err != nil {
		a.fail(c, err)
		return
	}
	var in struct {
		InputFileID        string            `json:"input_file_id"`
		Endpoint           string            `json:"endpoint"`
		CompletionWindow   string            `json:"completion_window"`
		Metadata           map[string]string `json:"metadata"`
		OutputExpiresAfter *struct {
			Anchor  string `json:"anchor"`
			Seconds int64  `json:"seconds"`
		} `json:"output_expires_after"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		a.fail(c, apperr.Field(apperr.Invalid, "invalid_json", "", "the request body must be a JSON object of input_file_id, endpoint and completion_window"))
		return
	}
	create := batches.Create{InputFileID: in.InputFileID, Endpoint: in.Endpoint, CompletionWindow: in.CompletionWindow, Metadata: in.Metadata}
	if e := in.OutputExpiresAfter; e != nil {
		if e.Anchor != "created_at" {
			a.fail(c, apperr.Field(apperr.Invalid, "invalid_output_expires_after", "output_expires_after.anchor", "output_expires_after.anchor must be created_at"))
			return
		}
		create.OutputExpiresAfter = max(e.Seconds, 1) // 0 would mean the default; the check refuses < 3600
	}
	b, err := a.Batches.Create(c.Request.Context(), a.Jobs, caller, create)
	if err != nil {
		a.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, toBatchOut(b))
}

// getBatch answers GET /v1/batches/{id}.
func (a *api) getBatch(c *gin.Context) {
	b, err := a.Batches.Get(c.Request.Context(), callerOf(c).OrgID, c.Param("id"))
	if err != nil {
		a.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, toBatchOut(b))
}

// listBatches answers GET /v1/batches: newest first, ?limit= (1 to 100,
// 20 by default) at a time, ?after= the last id of the previous page.
func (a *api) listBatches(c *gin.Context) {
	limit, err := queryLimit(c)
	if err != nil {
		a.fail(c, err)
		return
	}
	bs, more, err := a.Batches.List(c.Request.Context(), callerOf(c).OrgID, c.Query("after"), limit)
	if err != nil {
		a.fail(c, err)
		return
	}
	out := make([]batchOut, len(bs))
	for i, b := range bs {
		out[i] = toBatchOut(b)
	}
	page := gin.H{"object": "list", "data": out, "has_more": more, "first_id": nil, "last_id": nil}
	if len(out) > 0 {
		page["first_id"], page["last_id"] = out[0].ID, out[len(out)-1].ID
	}
	c.JSON(http.StatusOK, page)
}

// cancelBatch answers POST /v1/batches/{id}/cancel: the batch is
// cancelling until its running lines finish, then cancelled.
func (a *api) cancelBatch(c *gin.Context) {
	b, err := a.Batches.Cancel(c.Request.Context(), callerOf(c).OrgID, c.Param("id"))
	if err != nil {
		a.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, toBatchOut(b))
}
