-- Stored responses of the Responses API (store: true, the default): what
-- GET /v1/responses/{id} answers and what a request naming it as
-- previous_response_id continues. conversation is the exchange as chat
-- messages (a JSON array: the chain before it, its input, the model's
-- output with its tool calls), put in front of the continuation's input;
-- response is the Response object as answered. Each row is read and
-- deleted by its organization only, and expires after
-- SLUICE_RESPONSE_RETENTION: reads ignore an expired row at once, and a
-- periodic sweep deletes it.
CREATE TABLE stored_responses (
    id           TEXT PRIMARY KEY, -- resp_…, from the request id
    org_id       BIGINT NOT NULL REFERENCES organizations (id),
    token_id     BIGINT NOT NULL,
    model        TEXT NOT NULL,
    conversation TEXT NOT NULL,
    response     TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX stored_responses_expiry ON stored_responses (expires_at);
