-- Batch files in chunks: a file's content is rows of at most 256 KiB,
-- written as an upload arrives and read back one at a time, so neither an
-- upload nor a download nor a batch's reading of its input holds a whole
-- file. A file is complete once its last chunk is stored: until then
-- (an upload under way, or one whose node was lost) no read sees it, and
-- its expiry, a day after it began, lets the sweep delete what was left.

CREATE TABLE batch_file_chunks (
    file_id BIGINT NOT NULL REFERENCES batch_files (id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL CHECK (seq >= 0), -- from 0, in the content's order
    data    BLOB NOT NULL,
    PRIMARY KEY (file_id, seq)
);

-- The files stored so far move into chunks, whole.
WITH RECURSIVE pieces (file_id, seq, size) AS (
    SELECT id, 0, length(CAST(content AS BLOB)) FROM batch_files WHERE length(CAST(content AS BLOB)) > 0
    UNION ALL
    SELECT file_id, seq + 1, size FROM pieces WHERE (seq + 1) * 262144 < size
)
INSERT INTO batch_file_chunks (file_id, seq, data)
SELECT p.file_id, p.seq, substr(CAST(f.content AS BLOB), p.seq * 262144 + 1, 262144)
FROM pieces p JOIN batch_files f ON f.id = p.file_id;

UPDATE batch_files SET bytes = length(CAST(content AS BLOB));
ALTER TABLE batch_files DROP COLUMN content;
ALTER TABLE batch_files ADD COLUMN complete BOOLEAN NOT NULL DEFAULT TRUE;
