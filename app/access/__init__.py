"""Who may read or delete what (CONTRACT.md sections 2, 3 and 7), in one package without HTTP.

`principal` verifies LibreChat's token into a `Principal`; `namespaces` holds the `entity_id` check
and the namespaces a read, a delete or an upload may touch; `librechat_rule` is LibreChat's own
rule for an Agent's files, `viewer` reads what it needs from the catalogue, and `allowlist` re-checks
file ids against it (`ALLOWLIST_VERIFY=mongo`).
"""
