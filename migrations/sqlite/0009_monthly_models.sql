-- An organization's month per model and price version, kept as events land
-- like the other rollups: the draft invoice's usage lines, which every
-- dashboard shows, read from a handful of rows instead of summing the
-- month's hourly rows (thousands for a busy organization).
CREATE TABLE usage_monthly_models (
    org_id            INTEGER NOT NULL,
    period            DATETIME NOT NULL,
    model             TEXT NOT NULL,
    price_id          INTEGER NOT NULL,
    requests          INTEGER NOT NULL DEFAULT 0,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens     INTEGER NOT NULL DEFAULT 0,
    cost              INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (org_id, period, model, price_id)
);

-- Hours are stored in UTC as "2006-01-02 15:04:05+00:00"; their month
-- starts on the same year and month, day 01.
INSERT INTO usage_monthly_models (org_id, period, model, price_id, requests, prompt_tokens, completion_tokens, cached_tokens, cost)
SELECT org_id, substr(hour, 1, 8) || '01 00:00:00+00:00', model, price_id, sum(requests), sum(prompt_tokens),
       sum(completion_tokens), sum(cached_tokens), sum(cost)
FROM usage_hourly WHERE requests > 0
GROUP BY 1, 2, 3, 4;
