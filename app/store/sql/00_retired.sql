-- Search functions of the unreleased layouts before the scope type: a database that ran their
-- migrations (0004, 0007) loses them here. Nothing calls them any more.
DROP FUNCTION IF EXISTS ragoverlay_search_v2;
DROP FUNCTION IF EXISTS ragoverlay_search_v1;
