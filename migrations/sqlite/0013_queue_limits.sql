-- Every queue is bounded per organization: the most jobs it may have
-- queued (not yet finished) and the most batch lines pending across its
-- batches. The default tiers get their limits; any other tier gets the
-- free tier's until an admin sets its own.
ALTER TABLE tiers ADD COLUMN max_queued_jobs INTEGER NOT NULL DEFAULT 100 CHECK (max_queued_jobs >= 0);
ALTER TABLE tiers ADD COLUMN max_pending_batch_lines INTEGER NOT NULL DEFAULT 1000 CHECK (max_pending_batch_lines >= 0);
UPDATE tiers SET max_queued_jobs = 10000, max_pending_batch_lines = 500000 WHERE name = 'premium';

-- What each organization has queued, counted by conditional increments
-- (a take that would pass the tier's limit changes nothing), so that
-- nodes enqueueing at once never pass it together.
CREATE TABLE org_queues (
    org_id      BIGINT PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
    jobs        BIGINT NOT NULL DEFAULT 0 CHECK (jobs >= 0),
    batch_lines BIGINT NOT NULL DEFAULT 0 CHECK (batch_lines >= 0)
);

-- The queued jobs counted in org_queues.jobs, one row each, inserted in
-- the transaction that inserts the job: deleting a job's row is what gives
-- its place back, so it is given back once however often it is finished.
CREATE TABLE queued_jobs (
    job_id BIGINT PRIMARY KEY,
    org_id BIGINT NOT NULL
);

-- Lines already pending count from now on.
INSERT INTO org_queues (org_id, batch_lines)
SELECT b.org_id, COUNT(*) FROM batch_results r JOIN batches b ON b.id = r.batch_id
WHERE r.state = 'pending' AND b.status IN ('validating', 'in_progress', 'cancelling')
GROUP BY b.org_id;

-- Requests refused because a queue was full, in the rollups.
ALTER TABLE usage_hourly ADD COLUMN rejected_queue BIGINT NOT NULL DEFAULT 0;
