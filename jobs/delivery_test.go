package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/webhook"
)

// devSender posts to the test's servers on loopback over http.
func devSender() *webhook.Sender {
	return webhook.NewSender(webhook.Options{Hosts: webhook.Hosts{"127.0.0.1", "localhost"}, AllowPrivate: true, AllowHTTP: true})
}

func notifyWith(s *webhook.Sender) Notifier {
	return func(ctx context.Context, _ int64, url string, body []byte) error {
		return s.Post(ctx, url, "whsec_test", body)
	}
}

// otherOrg is a second organization's caller on the fixture's database.
func (f *fixture) otherOrg(name string) accounts.Caller {
	f.t.Helper()
	ctx := context.Background()
	o, u, err := f.store.CreateOrganizationWithOwner(ctx, name, "free", "o@"+strings.ToLower(name)+".example", "h", models.RoleOwner)
	if err != nil {
		f.t.Fatal(err)
	}
	tok, _, _ := f.store.CreateAPIToken(ctx, o.ID, u.ID, "jobs", nil)
	c, err := f.dir.CallerByTokenID(ctx, tok.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// until polls job id of orgID until done says it is, or fails the test.
func until(t *testing.T, q *Queue, orgID int64, id string, within time.Duration, what string, done func(Job) bool) Job {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		j, err := q.Get(context.Background(), orgID, id)
		if err != nil {
			t.Fatal(err)
		}
		if done(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: job %s not there after %v: %+v %+v", what, id, within, j, j.Callback)
		}
		time.Sleep(50 * time.Millisecond) // SQLite's one connection is the queue's too
	}
}

func callbackIs(status string) func(Job) bool {
	return func(j Job) bool { return j.Callback != nil && j.Callback.Status == status }
}

// slowHost holds every request until the test releases it: how long a
// callback waits there is the test's to say, not a timer's, so a loaded
// machine cannot have the host answer before the test has looked. It
// counts the requests in flight; one whose client gave up is no longer in
// flight, and is not answered.
type slowHost struct {
	*httptest.Server
	inFlight, maxInFlight, answered atomic.Int32
	release                         chan struct{}
	once                            sync.Once
}

// open makes the host answer everything now.
func (h *slowHost) open() { h.once.Do(func() { close(h.release) }) }

func newSlowHost(t *testing.T) *slowHost {
	h := &slowHost{release: make(chan struct{})}
	h.Server = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		n := h.inFlight.Add(1)
		for m := h.maxInFlight.Load(); n > m && !h.maxInFlight.CompareAndSwap(m, n); m = h.maxInFlight.Load() {
		}
		defer h.inFlight.Add(-1)
		select {
		case <-h.release:
			h.answered.Add(1)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(h.Close)
	t.Cleanup(h.open)
	return h
}

// postUnhurried posts a delivery bounded only by the attempt's own
// deadline (River's, 30 s). The webhook sender's client gives up after
// 10 s, and on a loaded machine org B's job can take that long behind org
// A's: A's held callbacks would then fail an attempt for the machine's
// slowness, not the queue's. The sender itself is the other tests'.
func postUnhurried(ctx context.Context, _ int64, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the receiver answered %d", resp.StatusCode)
	}
	return nil
}

// TestSlowCallbacksHoldNoOneUp: organization A's 12 jobs call back a host
// that holds every callback until the test lets it answer; organization
// B's job, queued after them, is done, and its callback to another host
// delivered, while A's callbacks wait at the slow host, at most
// HostConcurrency at once. Were a callback to hold a job's worker, or B's
// callback to wait behind A's, B's would wait for the slow host, which
// answers only after the test has looked.
func TestSlowCallbacksHoldNoOneUp(t *testing.T) {
	// How long the test waits for what should happen at once: the bound
	// of a failure, never the pace of a pass, so it is generous for a
	// loaded CI host under -race.
	const within = time.Minute
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		slow := newSlowHost(t)
		var fastHits, quickHits atomic.Int32
		fast := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { fastHits.Add(1) }))
		defer fast.Close()
		quick := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { quickHits.Add(1) }))
		defer quick.Close()
		// The slow host by name, the fast one by address: two hosts. The
		// baseline's quick host is the slow one's name, done with before
		// the slow host is called.
		byName := func(s *httptest.Server) string { return strings.Replace(s.URL, "127.0.0.1", "localhost", 1) + "/cb" }
		slowURL := byName(slow.Server)
		f.notify = postUnhurried
		q := f.queue(Config{Workers: 4}, nil)
		ctx := context.Background()
		f.start(q)
		t.Cleanup(slow.open) // before the queue stops
		b := f.otherOrg("Beta")
		// bJob is how long B's job, queued behind A's 12, takes to finish
		// and to have its callback delivered.
		bJob := func(a accounts.Caller, aCallback string) (took, tookCallback time.Duration, aJobs []string, done Job) {
			for range 12 {
				j, err := q.Enqueue(ctx, f.pipe, a, []byte(jobBody), "", aCallback)
				if err != nil {
					t.Fatal(err)
				}
				aJobs = append(aJobs, j.ID)
			}
			start := time.Now()
			jb, err := q.Enqueue(ctx, f.pipe, b, []byte(jobBody), "", fast.URL+"/cb?token=s3cret")
			if err != nil {
				t.Fatal(err)
			}
			until(t, q, b.OrgID, jb.ID, within, "org B's job succeeded", func(j Job) bool { return j.Status == Succeeded })
			took = time.Since(start)
			done = until(t, q, b.OrgID, jb.ID, within, "org B's callback delivered", callbackIs(CallbackDelivered))
			return took, time.Since(start), aJobs, done
		}
		// With quick callbacks first, for the baseline of this machine
		// and database: the same work for the queue, deliveries written
		// and posted, which on a loaded SQLite costs as much as the jobs;
		// then with slow ones. (Another organization for the baseline:
		// queued jobs may use half of a free bucket, and A's 24 would
		// wait for it.)
		baseTook, baseCallback, _, _ := bJob(f.otherOrg("Baseline"), byName(quick))
		testsync.WaitFor(t, within, "the baseline's 12 callbacks delivered", func() bool { return quickHits.Load() == 12 })
		took, tookCallback, aJobs, delivered := bJob(f.caller, slowURL)
		t.Logf("org B's job done in %v (baseline %v), its callback delivered in %v (baseline %v); the slow host holds %d (at most %d at once), answered %d",
			took, baseTook, tookCallback, baseCallback, slow.inFlight.Load(), slow.maxInFlight.Load(), slow.answered.Load())
		// Beside slow callbacks B's job takes as long as beside quick ones,
		// give or take the machine's noise and A's held deliveries
		// snoozing: 2 s more, or as much again as the baseline where that
		// is more (a loaded machine's noise grows with it). Held up by A's
		// callbacks, B would wait for the slow host, which has not
		// answered, or for an attempt's 30 s deadline.
		slack := func(base time.Duration) time.Duration { return base + max(2*time.Second, base) }
		if took > slack(baseTook) || tookCallback > slack(baseCallback) {
			t.Fatalf("org B's job took %v (baseline %v) and its callback %v (baseline %v) behind org A's slow callbacks, want ≤ %v and ≤ %v",
				took, baseTook, tookCallback, baseCallback, slack(baseTook), slack(baseCallback))
		}
		done := delivered
		if done.Output == nil || done.Output.Status != 200 || fastHits.Load() != 2 {
			t.Fatalf("org B's job %+v, its host hit %d times", done.Output, fastHits.Load())
		}
		if c := delivered.Callback; c.URL != fast.URL+"/cb?…" || c.Attempts != 1 || c.LastError != "" || c.DeliveredAt == nil {
			t.Fatalf("org B's callback %+v", c)
		}
		// A's callbacks are waiting at the slow host, never more than the
		// host's limit at once, and none answered yet.
		if slow.answered.Load() != 0 || slow.inFlight.Load() == 0 || slow.maxInFlight.Load() > 4 {
			t.Fatalf("slow host: in flight %d (max %d), answered %d", slow.inFlight.Load(), slow.maxInFlight.Load(), slow.answered.Load())
		}
		// A's jobs end (B's, queued after them, may have run first: the
		// queue is fair between organizations), their callbacks pending.
		for _, id := range aJobs {
			j := until(t, q, f.caller.OrgID, id, within, "org A's job succeeded", func(j Job) bool { return j.Status == Succeeded })
			if j.Callback == nil || j.Callback.Status != CallbackPending {
				t.Fatalf("org A's job %s: %+v %+v", id, j, j.Callback)
			}
		}
		// Once the host answers, every callback is delivered, once.
		slow.open()
		for _, id := range aJobs {
			c := until(t, q, f.caller.OrgID, id, within, "org A's callback delivered", callbackIs(CallbackDelivered)).Callback
			if c.Attempts != 1 || c.DeliveredAt == nil || c.URL != slowURL {
				t.Fatalf("org A's callback %+v", c)
			}
		}
		if slow.answered.Load() != 12 || slow.maxInFlight.Load() > 4 {
			t.Fatalf("slow host answered %d, at most %d at once", slow.answered.Load(), slow.maxInFlight.Load())
		}
	})
}

// TestACallbackWaitsForItsJobsEnd: River writes a job's end a moment after
// its worker has queued the callback. A callback whose job is still
// running waits (snoozed, no attempt counted) until the job's row is
// final, so a receiver that reads the job back never finds it running.
func TestACallbackWaitsForItsJobsEnd(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		var q *Queue
		var jobID string
		posted := make(chan Job, 1)
		f.notify = func(ctx context.Context, orgID int64, _ string, _ []byte) error {
			j, err := q.Get(ctx, orgID, jobID)
			if err != nil {
				return err
			}
			posted <- j
			return nil
		}
		q = f.queue(Config{}, nil)
		ctx := context.Background()
		j, err := q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", "http://localhost:1/cb")
		if err != nil {
			t.Fatal(err)
		}
		jobID = j.ID
		id := mustJobID(t, j.ID)
		// The job as a worker leaves it that moment: running, its callback
		// queued. (Set before the queue starts, so no worker takes it.)
		if err := db.Gorm.Exec("UPDATE river_job SET state = 'running', attempt = 1, attempted_at = created_at WHERE id = ?", id).Error; err != nil {
			t.Fatal(err)
		}
		if err := q.insertDelivery(ctx, deliveryArgs{OrgID: f.caller.OrgID, URL: "http://localhost:1/cb", Body: []byte(`{}`), JobID: id}); err != nil {
			t.Fatal(err)
		}
		f.start(q)
		testsync.WaitFor(t, 30*time.Second, "the callback waiting for its job", func() bool {
			select {
			case got := <-posted:
				t.Fatalf("the callback was posted while its job was %s", got.Status)
			default:
			}
			res, err := q.client.JobList(ctx, q.withMetadata(river.NewJobListParams().Kinds((deliveryArgs{}).Kind()), "callback_of", id))
			if err != nil || len(res.Jobs) != 1 {
				t.Fatalf("the delivery: %v %v", res, err)
			}
			var m struct {
				Snoozes int `json:"snoozes"`
			}
			return json.Unmarshal(res.Jobs[0].Metadata, &m) == nil && m.Snoozes >= 2
		})
		// River writes the job's end; the callback goes, and the receiver
		// reads the job as it ended.
		if err := db.Gorm.Exec("UPDATE river_job SET state = 'completed', finalized_at = attempted_at WHERE id = ?", id).Error; err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-posted:
			if got.Status != Succeeded || got.Callback == nil || got.Callback.Attempts != 1 {
				t.Fatalf("the receiver read the job as %s, its callback %+v", got.Status, got.Callback)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the callback was not posted after its job ended")
		}
		if c := until(t, q, f.caller.OrgID, j.ID, 30*time.Second, "delivered", callbackIs(CallbackDelivered)).Callback; c.Attempts != 1 || c.LastError != "" {
			t.Fatalf("the callback after its waits: %+v", c)
		}
	})
}

// TestAJobHasOneCallback: a job finished twice (run again after its node
// was lost, while the first run finished too) queues its callback once;
// budget alerts, which belong to no job, are each delivered.
func TestAJobHasOneCallback(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		f.notify = postUnhurried
		q := f.queue(Config{}, nil) // not started: the deliveries stay queued
		ctx := context.Background()
		for range 2 {
			if err := q.insertDelivery(ctx, deliveryArgs{OrgID: f.caller.OrgID, URL: "http://localhost:1/cb", Body: []byte(`{"n":1}`), JobID: 41}); err != nil {
				t.Fatal(err)
			}
			if err := q.Deliver(ctx, f.caller.OrgID, "http://localhost:1/alert", []byte(`{"alert":1}`)); err != nil {
				t.Fatal(err)
			}
		}
		res, err := q.client.JobList(ctx, river.NewJobListParams().Kinds((deliveryArgs{}).Kind()).Queues(deliveryQueue).First(10))
		if err != nil {
			t.Fatal(err)
		}
		count := func(path string) (n int) {
			for _, j := range res.Jobs {
				if strings.Contains(string(j.EncodedArgs), path) {
					n++
				}
			}
			return n
		}
		if callbacks, alerts := count("/cb"), count("/alert"); callbacks != 1 || alerts != 2 {
			t.Fatalf("%d callbacks of one job queued, want 1; %d alerts, want 2", callbacks, alerts)
		}
	})
}

// TestCallbacksAreRetriedAndTheirErrorsShown: a failed delivery is tried
// again with backoff; its attempts and last error are the job's to see.
func TestCallbacksAreRetriedAndTheirErrorsShown(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		var hits atomic.Int32
		flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if hits.Add(1) == 1 || strings.HasSuffix(r.URL.Path, "/down") {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}))
		defer flaky.Close()
		f.notify = notifyWith(devSender())
		q := f.queue(Config{}, nil)
		f.start(q)
		ctx := context.Background()
		j, _ := q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", flaky.URL+"/cb")
		if j.Callback == nil || j.Callback.Status != CallbackPending || j.Callback.Attempts != 0 {
			t.Fatalf("a queued job's callback: %+v", j.Callback)
		}
		c := until(t, q, f.caller.OrgID, j.ID, 10*time.Second, "delivered", callbackIs(CallbackDelivered)).Callback
		if c.Attempts != 2 || c.LastError != "webhook: the receiver answered 503" || c.DeliveredAt == nil {
			t.Fatalf("after a retry: %+v", c)
		}
		down, _ := q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", flaky.URL+"/down")
		c = until(t, q, f.caller.OrgID, down.ID, 10*time.Second, "failed", callbackIs(CallbackFailed)).Callback
		if c.Attempts != 3 || c.LastError != "webhook: the receiver answered 503" || c.DeliveredAt != nil {
			t.Fatalf("out of attempts: %+v", c)
		}
		// A job without a callback has none to show.
		plain, _ := q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", "")
		if p := until(t, q, f.caller.OrgID, plain.ID, 10*time.Second, "done", func(j Job) bool { return j.Status == Succeeded }); p.Callback != nil {
			t.Fatalf("no callback: %+v", p.Callback)
		}
	})
}

// TestACallbackWhoseNameTurnsPrivateIsRefusedWhenPosted: the name passed
// when it was saved; at delivery it resolves to loopback, and the
// delivery fails with that error, the listener never reached.
func TestACallbackWhoseNameTurnsPrivateIsRefusedWhenPosted(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		var hits atomic.Int32
		inside := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
		defer inside.Close()
		var addr atomic.Value
		addr.Store(netip.MustParseAddr("93.184.216.34"))
		s := webhook.NewSender(webhook.Options{Hosts: webhook.Hosts{"hooks.example.com"}, AllowHTTP: true,
			Lookup: func(context.Context, string) ([]netip.Addr, error) {
				return []netip.Addr{addr.Load().(netip.Addr)}, nil
			}})
		hook := "http://hooks.example.com" + inside.URL[strings.LastIndex(inside.URL, ":"):] + "/cb"
		ctx := context.Background()
		if err := s.Check(ctx, hook); err != nil {
			t.Fatalf("saved: %v", err)
		}
		addr.Store(netip.MustParseAddr("127.0.0.1")) // rebound
		f.notify = notifyWith(s)
		q := f.queue(Config{}, nil)
		f.start(q)
		j, _ := q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", hook)
		c := until(t, q, f.caller.OrgID, j.ID, 10*time.Second, "failed", callbackIs(CallbackFailed)).Callback
		if c.Attempts != 3 || !strings.Contains(c.LastError, "127.0.0.1 is a loopback address") || hits.Load() != 0 {
			t.Fatalf("%+v, listener reached %d times", c, hits.Load())
		}
	})
}

func TestHostSlots(t *testing.T) {
	h := &hostSlots{limit: 2, busy: map[string]int{}}
	var wg sync.WaitGroup
	var in, peak, refused atomic.Int32
	for range 64 {
		wg.Go(func() {
			release, ok := h.take("a.example")
			if !ok {
				refused.Add(1)
				return
			}
			n := in.Add(1)
			for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
			}
			time.Sleep(time.Millisecond)
			in.Add(-1)
			release()
		})
	}
	wg.Wait()
	if peak.Load() > 2 || refused.Load() == 0 || len(h.busy) != 0 {
		t.Fatalf("peak %d, refused %d, left %v", peak.Load(), refused.Load(), h.busy)
	}
	if _, ok := h.take("b.example"); !ok {
		t.Fatal("another host is not held")
	}
}
