package handlers

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// filesEnv is an env with the Batch API's files and an organization's
// token (free tier: 1 MiB files).
func filesEnv(t *testing.T, db *models.DB) (e *env, key string) {
	t.Helper()
	e = newEnv(t, db)
	key, _ = e.apiToken(e.signup("files@example.com", "Files"))
	return e, key
}

// stored counts the file rows and content chunks in the database, complete
// or not.
func stored(t *testing.T, db *models.DB) (files, chunks int64) {
	t.Helper()
	db.Gorm.Raw("SELECT COUNT(*) FROM batch_files").Scan(&files)
	db.Gorm.Raw("SELECT COUNT(*) FROM batch_file_chunks").Scan(&chunks)
	return files, chunks
}

// wantOpenAIError checks an answer is a refusal in OpenAI's shape: an
// error object of message, type, param and code.
func wantOpenAIError(t *testing.T, w *httptest.ResponseRecorder, status int, code string) {
	t.Helper()
	wantRefusal(t, w, status, code, "")
	e := decode(t, w)["error"].(map[string]any)
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e[k]; !ok {
			t.Errorf("the error lacks %q: %s", k, w.Body.String())
		}
	}
}

// An upload is stored as it arrives and refused as soon as it passes the
// tier's limit, in OpenAI's shape and the route's own words, leaving no
// file and no chunk behind (chunks of it were stored before the refusal);
// so does one refused after its body was read (a bad purpose). A file of
// several chunks comes back byte for byte, with its Content-Length.
func TestUploadsStreamAndDownloadsComeBackWhole(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e, key := filesEnv(t, db)
		line := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}}` + "\n"

		// 3 MiB for a 1 MiB tier: refused mid-stream.
		bigBody, bigCT := multipartUpload(strings.Repeat(line, (3<<20)/len(line)))
		w, read := e.doCounting(request{method: "POST", path: "/v1/files", bearer: key, contentType: bigCT, body: bigBody})
		wantOpenAIError(t, w, http.StatusRequestEntityTooLarge, "file_too_large")
		if msg := decode(t, w)["error"].(map[string]any)["message"]; msg != "the file is larger than the free tier accepts: batch files of up to 1 MiB (1048576 bytes); split the requests into several files, or ask for a larger tier" {
			t.Errorf("message %q", msg)
		}
		if limit := int64(1<<20 + 64<<10 + 1); read > limit {
			t.Errorf("read %d of a %d-byte upload, more than the limit and the form's room (%d)", read, len(bigBody), limit)
		}
		if files, chunks := stored(t, db); files != 0 || chunks != 0 {
			t.Errorf("a refused upload left %d file rows and %d chunks", files, chunks)
		}
		// Read whole, then refused: nothing left either.
		body, ct := multipartUpload(line)
		body = strings.Replace(body, "\r\n\r\nbatch\r\n", "\r\n\r\nfine-tune\r\n", 1)
		wantOpenAIError(t, e.do(request{method: "POST", path: "/v1/files", bearer: key, contentType: ct, body: body}), http.StatusBadRequest, "invalid_purpose")
		if files, chunks := stored(t, db); files != 0 || chunks != 0 {
			t.Errorf("an upload refused for its purpose left %d file rows and %d chunks", files, chunks)
		}

		// Exactly the limit, in four chunks, every byte value in it.
		content := make([]byte, 1<<20)
		for i := range content {
			content[i] = byte(i*7 + i/251)
		}
		body, ct = multipartUpload(string(content))
		w = e.do(request{method: "POST", path: "/v1/files", bearer: key, contentType: ct, body: body})
		if w.Code != http.StatusOK || decode(t, w)["bytes"] != float64(len(content)) {
			t.Fatalf("upload: %d %s", w.Code, w.Body.String())
		}
		id := decode(t, w)["id"].(string)
		if files, chunks := stored(t, db); files != 1 || chunks != int64(len(content)/models.FileChunk) {
			t.Errorf("%d file rows and %d chunks for one file of %d chunks", files, chunks, len(content)/models.FileChunk)
		}
		w = e.do(request{method: "GET", path: "/v1/files/" + id + "/content", bearer: key})
		if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), content) {
			t.Fatalf("download: %d, %d bytes, equal %v", w.Code, w.Body.Len(), bytes.Equal(w.Body.Bytes(), content))
		}
		if got := w.Header().Get("Content-Length"); got != strconv.Itoa(len(content)) {
			t.Errorf("Content-Length %q, want %d", got, len(content))
		}
		if got := w.Header().Get("Content-Disposition"); got != `attachment; filename=in.jsonl` {
			t.Errorf("Content-Disposition %q", got)
		}
		// Odd sizes too: a chunk and a byte, and an empty file.
		for _, n := range []int{models.FileChunk + 1, 0} {
			body, ct := multipartUpload(string(content[:n]))
			w := e.do(request{method: "POST", path: "/v1/files", bearer: key, contentType: ct, body: body})
			if w.Code != http.StatusOK {
				t.Fatalf("upload of %d bytes: %d %s", n, w.Code, w.Body.String())
			}
			w = e.do(request{method: "GET", path: fmt.Sprintf("/v1/files/%s/content", decode(t, w)["id"]), bearer: key})
			if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), content[:n]) || w.Header().Get("Content-Length") != strconv.Itoa(n) {
				t.Errorf("%d bytes: %d, %d bytes back, Content-Length %q", n, w.Code, w.Body.Len(), w.Header().Get("Content-Length"))
			}
		}
		// Deleting a file deletes its chunks.
		if w := e.do(request{method: "DELETE", path: "/v1/files/" + id, bearer: key}); w.Code != http.StatusOK {
			t.Fatalf("delete: %d %s", w.Code, w.Body.String())
		}
		if files, chunks := stored(t, db); files != 2 || chunks != 2 {
			t.Errorf("after deleting the 4-chunk file: %d files and %d chunks, want 2 and 2", files, chunks)
		}
	})
}

// A signed upload refused for its signature, whose content was stored as
// it arrived, leaves nothing behind.
func TestARefusedSignedUploadLeavesNothing(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e, key, secret := signingEnv(t, db)
		body, ct := multipartUpload(strings.Repeat("x", 600<<10)) // three chunks
		upload := signed(request{method: "POST", path: "/v1/files", bearer: key, contentType: ct, body: body}, secret, e.clock.Now().Unix(), "n-1")
		upload.body = strings.Replace(upload.body, "xxxx", "xxxy", 1)
		wantOpenAIError(t, e.do(upload), http.StatusUnauthorized, "invalid_signature")
		if files, chunks := stored(t, db); files != 0 || chunks != 0 {
			t.Errorf("a refused signed upload left %d file rows and %d chunks", files, chunks)
		}
	})
}
