-- Provider keys name the kind of provider they belong to: the wire format
-- Sluice speaks to it. Every key so far is OpenAI-compatible.
ALTER TABLE upstream_keys ADD COLUMN provider TEXT NOT NULL DEFAULT 'openai';

-- Prompt tokens written to a provider's prompt cache and a model's
-- reasoning tokens are billed at their own prices where a model has them
-- (NULL: the input price, the output price).
ALTER TABLE model_prices ADD COLUMN cache_creation_per_mtok BIGINT;
ALTER TABLE model_prices ADD COLUMN reasoning_per_mtok BIGINT;

-- Each usage event keeps those counts and the API the client spoke.
ALTER TABLE usage_events ADD COLUMN cache_creation_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_events ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_events ADD COLUMN dialect TEXT NOT NULL DEFAULT 'chat';
