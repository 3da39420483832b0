-- Model aliases: a public model name (e.g. "fast") that routes each request
-- to one of its target models, drawn by weight, and, when every key of
-- that model is unavailable, to its fallbacks in order. The targets and
-- fallbacks are JSON: a handful of names read whole with their alias.

CREATE TABLE model_aliases (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT NOT NULL UNIQUE,
    targets    TEXT NOT NULL,             -- [{"model": "gpt-4o-mini", "weight": 70}, ...]
    fallbacks  TEXT NOT NULL DEFAULT '[]', -- ["gpt-4o", ...], tried in this order
    created_at DATETIME NOT NULL,
    updated_at DATETIME NOT NULL,
    created_by BIGINT,                     -- the admin; NULL for the system
    updated_by BIGINT
);
