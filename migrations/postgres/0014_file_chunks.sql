-- Batch files in chunks: a file's content is rows of at most 256 KiB,
-- written as an upload arrives and read back one at a time, so neither an
-- upload nor a download nor a batch's reading of its input holds a whole
-- file. A file is complete once its last chunk is stored: until then
-- (an upload under way, or one whose node was lost) no read sees it, and
-- its expiry, a day after it began, lets the sweep delete what was left.

CREATE TABLE batch_file_chunks (
    file_id BIGINT NOT NULL REFERENCES batch_files (id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL CHECK (seq >= 0), -- from 0, in the content's order
    data    BYTEA NOT NULL,
    PRIMARY KEY (file_id, seq)
);

-- The files stored so far move into chunks, whole.
INSERT INTO batch_file_chunks (file_id, seq, data)
SELECT f.id, s.seq, substring(f.content FROM s.seq * 262144 + 1 FOR 262144)
FROM batch_files f
CROSS JOIN LATERAL generate_series(0, (octet_length(f.content) - 1) / 262144) AS s (seq)
WHERE octet_length(f.content) > 0;

UPDATE batch_files SET bytes = octet_length(content);
ALTER TABLE batch_files DROP COLUMN content;
ALTER TABLE batch_files ADD COLUMN complete BOOLEAN NOT NULL DEFAULT TRUE;
