package batches

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/models"
)

// Endpoint is the one endpoint a batch's lines may call.
const Endpoint = "/v1/chat/completions"

// maxCustomID bounds a custom_id: it is stored with every line.
const maxCustomID = 512

// inputLine is one line of a batch's input file, read: a request to queue,
// or why it cannot be (failure).
type inputLine struct {
	line     int // in the file, from 1
	customID string
	body     json.RawMessage
	failure  *jobs.Failure
}

// readLines splits an input file into its requests (blank lines are
// skipped) and checks each: a JSON object with a custom_id unique in the
// file, method POST, url the batch's endpoint, and a body the pipeline
// would accept. A line that fails a check is kept with its failure: it
// fails alone, not the batch.
func readLines(content []byte, p *completion.Pipeline) []inputLine {
	content = bytes.TrimPrefix(content, []byte("\xef\xbb\xbf")) // a byte order mark some editors write
	seen := map[string]int{}
	var out []inputLine
	for i, raw := range bytes.Split(content, []byte("\n")) {
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 {
			continue
		}
		l := inputLine{line: i + 1}
		l.customID, l.body, l.failure = checkLine(raw, p)
		if l.customID != "" {
			if first, dup := seen[l.customID]; dup && l.failure == nil {
				l.body, l.failure = nil, &jobs.Failure{Code: "duplicate_custom_id",
					Message: fmt.Sprintf("custom_id %q is already used by line %d; each request needs its own", l.customID, first)}
			} else if !dup {
				seen[l.customID] = l.line
			}
		}
		if l.failure != nil {
			l.failure.Message = "line " + strconv.Itoa(l.line) + ": " + l.failure.Message
		}
		out = append(out, l)
	}
	return out
}

// checkLine reads one line; the custom_id is returned whenever it could be
// read, so a failed line still names its request.
func checkLine(raw []byte, p *completion.Pipeline) (string, json.RawMessage, *jobs.Failure) {
	var l struct {
		CustomID json.RawMessage `json:"custom_id"`
		Method   json.RawMessage `json:"method"`
		URL      json.RawMessage `json:"url"`
		Body     json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(raw, &l); err != nil || raw[0] != '{' {
		return "", nil, &jobs.Failure{Code: "invalid_json", Message: "not a JSON object of custom_id, method, url and body"}
	}
	var customID, method, url string
	if json.Unmarshal(l.CustomID, &customID) != nil || customID == "" {
		return "", nil, &jobs.Failure{Code: "missing_custom_id", Message: "custom_id must be a non-empty string that names the request in the output"}
	}
	if len(customID) > maxCustomID {
		return "", nil, &jobs.Failure{Code: "invalid_custom_id", Message: "custom_id is longer than 512 bytes"}
	}
	if json.Unmarshal(l.Method, &method) != nil || method != "POST" {
		return customID, nil, &jobs.Failure{Code: "invalid_method", Message: `method must be "POST"`}
	}
	if json.Unmarshal(l.URL, &url) != nil || url != Endpoint {
		return customID, nil, &jobs.Failure{Code: "invalid_url", Message: `url must be "` + Endpoint + `", the batch's endpoint`}
	}
	if len(l.Body) == 0 || l.Body[0] != '{' {
		return customID, nil, &jobs.Failure{Code: "invalid_body", Message: "body must be a chat completion request (a JSON object)"}
	}
	if err := jobs.Check(p, l.Body); err != nil {
		f := jobs.FailureOf(apperr.As(err))
		f.Message = "body: " + f.Message
		return customID, nil, f
	}
	return customID, l.Body, nil
}

// resultLine is one line of an output or error file, in OpenAI's shape.
type resultLine struct {
	ID       string        `json:"id"`
	CustomID *string       `json:"custom_id"`
	Response *lineResponse `json:"response"`
	Error    *jobs.Failure `json:"error"`
}

// lineResponse is the answer a line got.
type lineResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

// lineID names a line in the files: "batch_req_" and its job's number, or
// for a line that never became a job, its batch's and its own.
func lineID(jobID string, batchID int64, line int) string {
	if n, ok := strings.CutPrefix(jobID, "job_"); ok {
		return "batch_req_" + n
	}
	return fmt.Sprintf("batch_req_%d_%d", batchID, line)
}

// failedLine is the error file's line of a request that got no answer.
func failedLine(id, customID string, f *jobs.Failure) []byte {
	r := resultLine{ID: id, Error: f}
	if customID != "" {
		r.CustomID = &customID
	}
	b, _ := json.Marshal(r)
	return b
}

// outcome writes a job's output as its line of the output file (a 2xx
// answer) or of the error file: with the provider's answer when it refused
// the request, without one when there was none.
func outcome(jobID, customID string, out jobs.Output) models.LineOutcome {
	r := resultLine{ID: lineID(jobID, 0, 0), CustomID: &customID, Error: out.Error}
	if out.Body != nil && out.Status != 0 {
		r.Response = &lineResponse{StatusCode: out.Status, RequestID: out.RequestID, Body: asJSON(out.Body)}
	}
	ok := out.Error == nil && out.Status/100 == 2
	if !ok && r.Error == nil {
		r.Error = &jobs.Failure{Code: "request_failed", Message: "the request was answered " + strconv.Itoa(out.Status)}
	}
	b, _ := json.Marshal(r)
	o := models.LineOutcome{OK: ok, Result: b}
	if r.Error != nil {
		o.ErrorCode = r.Error.Code
	}
	return o
}

// asJSON is body when it is JSON, and otherwise body as a JSON string.
func asJSON(body []byte) json.RawMessage {
	if json.Valid(body) {
		return body
	}
	s, _ := json.Marshal(string(body))
	return s
}
