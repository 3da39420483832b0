-- An organization's month per model and price version, kept as events land
-- like the other rollups: the draft invoice's usage lines, which every
-- dashboard shows, read from a handful of rows instead of summing the
-- month's hourly rows (thousands for a busy organization).
CREATE TABLE usage_monthly_models (
    org_id            BIGINT NOT NULL,
    period            TIMESTAMPTZ NOT NULL,
    model             TEXT NOT NULL,
    price_id          BIGINT NOT NULL,
    requests          BIGINT NOT NULL DEFAULT 0,
    prompt_tokens     BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    cached_tokens     BIGINT NOT NULL DEFAULT 0,
    cost              BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (org_id, period, model, price_id)
);

INSERT INTO usage_monthly_models (org_id, period, model, price_id, requests, prompt_tokens, completion_tokens, cached_tokens, cost)
SELECT org_id, date_trunc('month', hour, 'UTC'), model, price_id, sum(requests), sum(prompt_tokens),
       sum(completion_tokens), sum(cached_tokens), sum(cost)
FROM usage_hourly WHERE requests > 0
GROUP BY 1, 2, 3, 4;
