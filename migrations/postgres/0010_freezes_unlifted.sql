-- The admin overview counts the freezes in force through freezes_until
-- now; 0005's partial index on unlifted freezes is no longer read. (0005
-- is kept as it shipped, so databases migrated before and after agree.)
DROP INDEX IF EXISTS freezes_unlifted;
