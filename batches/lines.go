package batches

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/models"
)

// Endpoint and EmbeddingsEndpoint are the endpoints a batch may be for;
// each of its lines must call the batch's.
const (
	Endpoint           = jobs.ChatCompletions
	EmbeddingsEndpoint = jobs.Embeddings
)

// endpointFailures are the failures of a line that does not call its
// batch's endpoint, or whose body is not that endpoint's, made once.
type endpointFailures struct{ url, body *jobs.Failure }

var failuresOf = map[string]endpointFailures{
	Endpoint: {
		url:  &jobs.Failure{Code: "invalid_url", Message: `url must be "` + Endpoint + `", the batch's endpoint`},
		body: &jobs.Failure{Code: "invalid_body", Message: "body must be a chat completion request (a JSON object)"},
	},
	EmbeddingsEndpoint: {
		url:  &jobs.Failure{Code: "invalid_url", Message: `url must be "` + EmbeddingsEndpoint + `", the batch's endpoint`},
		body: &jobs.Failure{Code: "invalid_body", Message: "body must be an embeddings request (a JSON object)"},
	},
}

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

// bom is the byte order mark some editors write at a file's start.
var bom = []byte("\xef\xbb\xbf")

// lineReader reads an input file's lines (split at "\n", as numbered in
// the file), at most max bytes of each: a longer line is read past, not
// held, and said to be too long.
type lineReader struct {
	br  *bufio.Reader
	max int
	buf []byte
	n   int // the number of the line last read, from 1
	eof bool
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line, without its newline and valid until the
// next call (nil when it was too long), and io.EOF after the last.
func (r *lineReader) next() (raw []byte, tooLong bool, err error) {
	if r.eof {
		return nil, false, io.EOF
	}
	r.buf = r.buf[:0]
	for first := true; ; first = false {
		frag, err := r.br.ReadSlice('\n')
		if first && err == nil && len(frag) <= r.max+1 {
			// The whole line is in the reader's buffer: no copy.
			r.n++
			return frag[:len(frag)-1], false, nil
		}
		if !tooLong {
			if len(r.buf)+len(frag) > r.max+1 { // +1: its newline
				tooLong, r.buf = true, r.buf[:0]
			} else {
				r.buf = append(r.buf, frag...)
			}
		}
		switch err {
		case bufio.ErrBufferFull:
			continue
		case nil:
		case io.EOF:
			r.eof = true
		default:
			return nil, false, err
		}
		r.n++
		if tooLong {
			return nil, true, nil
		}
		return bytes.TrimSuffix(r.buf, []byte("\n")), false, nil
	}
}

// scanner reads an input file's requests (blank lines are skipped) and
// checks each as it is read: a JSON object with a custom_id unique in the
// file, method POST, url the batch's endpoint, and a body the pipeline
// would accept, on a line of at most the request size limit. A line that
// fails a check is kept with its failure: it fails alone, not the batch.
type scanner struct {
	lines    *lineReader
	p        *completion.Pipeline
	endpoint string         // the batch's
	seen     map[string]int // custom_id: the line that has it first
	// fields is the line last read, decoded: its buffers serve the next.
	fields envelope
}

// newScanner reads the lines of r for a batch of endpoint (Endpoint or
// EmbeddingsEndpoint).
func newScanner(r io.Reader, p *completion.Pipeline, endpoint string, maxLine int) *scanner {
	return &scanner{lines: newLineReader(r, maxLine), p: p, endpoint: endpoint, seen: map[string]int{}}
}

// next returns the next request, io.EOF after the last; a failed one's
// message does not yet name its line (numbered does), and its body is
// valid until the next call (keep a copy).
func (s *scanner) next() (inputLine, error) {
	for {
		raw, tooLong, err := s.lines.next()
		if err != nil {
			return inputLine{}, err
		}
		if s.lines.n == 1 {
			raw = bytes.TrimPrefix(raw, bom)
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 && !tooLong {
			continue
		}
		l := inputLine{line: s.lines.n}
		if tooLong {
			l.failure = &jobs.Failure{Code: "line_too_long", Message: "the line is longer than " + strconv.Itoa(s.lines.max) +
				" bytes, more than a request may be"}
		} else {
			l.customID, l.body, l.failure = checkLine(raw, s.p, s.endpoint, &s.fields)
		}
		if l.customID != "" {
			if first, dup := s.seen[l.customID]; dup && l.failure == nil {
				l.body, l.failure = nil, &jobs.Failure{Code: "duplicate_custom_id",
					Message: fmt.Sprintf("custom_id %q is already used by line %d; each request needs its own", l.customID, first)}
			} else if !dup {
				s.seen[l.customID] = l.line
			}
		}
		return l, nil
	}
}

// numbered is l's failure as the error file says it: with its line.
func (l inputLine) numbered() inputLine {
	if l.failure != nil {
		f := *l.failure
		f.Message = "line " + strconv.Itoa(l.line) + ": " + f.Message
		l.failure = &f
	}
	return l
}

// readLines reads every request of content, a chat batch's (for tests
// and the fuzzer).
func readLines(content []byte, p *completion.Pipeline) []inputLine {
	s := newScanner(bytes.NewReader(content), p, Endpoint, len(content)+1)
	var out []inputLine
	for {
		l, err := s.next()
		if err != nil {
			return out
		}
		l.body = bytes.Clone(l.body)
		out = append(out, l.numbered())
	}
}

// bodyOf reads the custom_id and body of a line already checked.
func bodyOf(raw []byte) (jobs.Line, error) {
	var l struct {
		CustomID string          `json:"custom_id"`
		Body     json.RawMessage `json:"body"`
	}
	err := json.Unmarshal(raw, &l)
	return jobs.Line{CustomID: l.CustomID, Body: l.Body}, err
}

// The failures of a line that every such line shares (numbered copies
// them): a file of a thousand bad lines allocates no failure for each.
var (
	errInvalidJSON     = &jobs.Failure{Code: "invalid_json", Message: "not a JSON object of custom_id, method, url and body"}
	errMissingCustomID = &jobs.Failure{Code: "missing_custom_id", Message: "custom_id must be a non-empty string that names the request in the output"}
	errLongCustomID    = &jobs.Failure{Code: "invalid_custom_id", Message: "custom_id is longer than " + strconv.Itoa(maxCustomID) + " bytes"}
	errMethod          = &jobs.Failure{Code: "invalid_method", Message: `method must be "POST"`}
)

// envelope is a line's fields, as checkLine decodes them: as
// json.Unmarshal would into a struct of four json.RawMessage (names
// matched exactly or else case-insensitively, the last of a duplicate
// kept, other members ignored), without its allocations, line after line:
// a decoder and the fields' buffers serve every line.
type envelope struct {
	CustomID, Method, URL, Body json.RawMessage

	r   bytes.Reader
	dec *jsontext.Decoder
}

// envelopeOptions accept what json.Unmarshal accepts.
var envelopeOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// decode reads raw, a JSON object, into l's fields; a field raw lacks is
// left empty.
func (l *envelope) decode(raw []byte) error {
	l.CustomID, l.Method, l.URL, l.Body = l.CustomID[:0], l.Method[:0], l.URL[:0], l.Body[:0]
	l.r.Reset(raw)
	if l.dec == nil {
		l.dec = jsontext.NewDecoder(&l.r, envelopeOptions...)
	} else {
		l.dec.Reset(&l.r, envelopeOptions...)
	}
	if tok, err := l.dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return errNotObject
	}
	for l.dec.PeekKind() != '}' {
		name, err := l.dec.ReadValue()
		if err != nil {
			return err
		}
		field := l.field(name)
		value, err := l.dec.ReadValue()
		if err != nil {
			return err
		}
		if field != nil {
			*field = append((*field)[:0], value...)
		}
	}
	if _, err := l.dec.ReadToken(); err != nil { // the object's end
		return err
	}
	if _, err := l.dec.ReadToken(); err != io.EOF { // and nothing after it
		return errNotObject
	}
	return nil
}

var errNotObject = errors.New("not one JSON object")

// field is the field a member's quoted name names, nil for none.
func (l *envelope) field(quoted jsontext.Value) *json.RawMessage {
	fields := [...]struct {
		name  string
		field *json.RawMessage
	}{{"custom_id", &l.CustomID}, {"method", &l.Method}, {"url", &l.URL}, {"body", &l.Body}}
	if n := len(quoted); n >= 2 && bytes.IndexByte(quoted, '\\') < 0 {
		for _, f := range fields {
			if string(quoted[1:n-1]) == f.name {
				return f.field
			}
		}
	}
	name, err := jsontext.AppendUnquote(nil, quoted)
	if err != nil {
		return nil
	}
	for _, f := range fields {
		if string(name) == f.name {
			return f.field
		}
	}
	for _, f := range fields {
		if foldEqual(name, f.name) {
			return f.field
		}
	}
	return nil
}

// foldEqual matches a member's name to a field's as json.Unmarshal does
// when no name matches exactly: each rune folded to ToUpper(ToLower(r)).
func foldEqual(name []byte, field string) bool {
	fold := func(b []byte) []rune {
		var out []rune
		for _, r := range string(b) {
			out = append(out, unicode.ToUpper(unicode.ToLower(r)))
		}
		return out
	}
	return slices.Equal(fold(name), fold([]byte(field)))
}

// checkLine reads one line into l; the custom_id is returned whenever it
// could be read, so a failed line still names its request. The body is
// l's, valid until l is used again; a failure it returns may be shared:
// change a copy.
func checkLine(raw []byte, p *completion.Pipeline, endpoint string, l *envelope) (string, json.RawMessage, *jobs.Failure) {
	// The fields keep their buffers from line to line (json.RawMessage
	// decodes into its own): a field the line lacks is left empty.
	if raw[0] != '{' || l.decode(raw) != nil {
		return "", nil, errInvalidJSON
	}
	customID, ok := jsonString(l.CustomID)
	if !ok || customID == "" {
		return "", nil, errMissingCustomID
	}
	if len(customID) > maxCustomID {
		return "", nil, errLongCustomID
	}
	if method, ok := jsonString(l.Method); !ok || method != "POST" {
		return customID, nil, errMethod
	}
	if url, ok := jsonString(l.URL); !ok || url != endpoint {
		return customID, nil, failuresOf[endpoint].url
	}
	if len(l.Body) == 0 || l.Body[0] != '{' {
		return customID, nil, failuresOf[endpoint].body
	}
	if err := jobs.Check(p, endpoint, l.Body); err != nil {
		f := jobs.FailureOf(apperr.As(err))
		f.Message = "body: " + f.Message
		return customID, nil, f
	}
	return customID, l.Body, nil
}

// jsonString decodes a JSON string as json.Unmarshal would, and says
// whether raw was one; a plain one (no escapes, valid UTF-8) is taken as it
// is, without the decoder.
func jsonString(raw json.RawMessage) (string, bool) {
	if string(raw) == "null" { // as json.Unmarshal: no error, nothing set
		return "", true
	}
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if inner := raw[1 : len(raw)-1]; raw[len(raw)-1] == '"' && bytes.IndexByte(inner, '\\') < 0 && bytes.IndexByte(inner, '"') < 0 && utf8.Valid(inner) && !hasControl(inner) {
		return string(inner), true
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err == nil
}

// hasControl says whether b has a byte JSON strings may not hold as is.
func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
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
