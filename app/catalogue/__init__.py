"""LibreChat's own catalogue (MongoDB), read-only (CONTRACT.md section 7).

`documents` names the fields and permission bits of its documents; `mongo` reads the few documents
the access rule (`app/access/`) and the audit need; `audit` checks a deployment's knowledge bases
for overlaps, unembedded files and public sharing.
"""
