package batches

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/completion"
)

// countingReader counts the bytes read from r.
type countingReader struct {
	r    io.Reader
	read int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}

// Reading a file of 60,000 requests stops at the 50,001st: refused, and
// read no further than the reader's buffer past it.
func TestReadingStopsAtTheFirstLinePastMaxLines(t *testing.T) {
	s := New(Deps{Pipeline: completion.New(completion.Deps{Log: slog.New(slog.DiscardHandler), Now: time.Now, DefaultMaxTokens: 512})},
		Config{Now: time.Now})
	const line = "x\n"
	content := strings.Repeat(line, 60_000) + strings.Repeat("y", 4<<20) // and 4 MiB more that must not be read
	r := &countingReader{r: strings.NewReader(content)}
	_, err := s.read(r, "file-1", Endpoint)
	if e := apperr.As(err); e.Reason != "too_many_requests" || !strings.Contains(e.Message, "at most 50000 requests") {
		t.Fatalf("60,000 lines: %v", err)
	}
	if stop := (MaxLines + 1) * len(line); r.read > stop+64<<10 {
		t.Errorf("read %d bytes; the 50,001st line ends at %d", r.read, stop)
	}
}

// A line longer than the limit fails alone, without being held: the lines
// after it are read as ever.
func TestALongLineFailsAlone(t *testing.T) {
	p := completion.New(completion.Deps{Log: slog.New(slog.DiscardHandler), Now: time.Now, DefaultMaxTokens: 512})
	ok := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}}`
	long := strings.Replace(ok, `"hi"`, `"`+strings.Repeat("h", 200<<10)+`"`, 1)
	sc := newScanner(strings.NewReader(long+"\n"+strings.Replace(ok, `"a"`, `"b"`, 1)+"\n"+long), p, Endpoint, 100<<10)
	var got []inputLine
	for {
		l, err := sc.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, l.numbered())
	}
	if len(got) != 3 || got[0].failure == nil || got[0].failure.Code != "line_too_long" || got[0].failure.Message != "line 1: the line is longer than 102400 bytes, more than a request may be" ||
		got[1].failure != nil || got[1].customID != "b" || got[2].line != 3 || got[2].failure == nil || got[2].failure.Code != "line_too_long" {
		t.Fatalf("%+v", got)
	}
	if len(sc.lines.buf) > 100<<10+1 || cap(sc.lines.buf) > 256<<10 {
		t.Errorf("the line buffer grew to %d bytes (cap %d) for 200 KiB lines", len(sc.lines.buf), cap(sc.lines.buf))
	}
}
