"""LibreChat's own catalogue (MongoDB), read-only: who may search which files (CONTRACT.md section 7).

`access` holds LibreChat's rule as pure functions on documents as pymongo returns them; `audit` checks
a deployment's knowledge bases for overlaps, unembedded files and public sharing; `mongo` reads the
few documents both need.
"""
