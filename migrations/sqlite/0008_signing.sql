-- Request signing: a token that requires signed requests keeps its signing
-- secret here, sealed with the master key (the gateway needs the secret
-- itself to check an HMAC, so it cannot be hashed like the token). NULL:
-- the token takes unsigned requests.
ALTER TABLE api_tokens ADD COLUMN signing_secret TEXT;
