"""Who may read or delete what (CONTRACT.md sections 2, 3 and 7), in one package without HTTP.

`principal` verifies LibreChat's token into a `Principal`; `namespaces` holds the `entity_id` check,
the namespaces a read, a delete or an upload may touch, and `Caller` (a principal with the fixed
namespace set of an MCP key); `librechat_rule` is LibreChat's own rule for an Agent's files,
`viewer` reads what it needs from the catalogue, and `allowlist` re-checks file ids against it
(`ALLOWLIST_VERIFY=mongo`). `scope` puts them together: `Access.read_scope` and
`Access.delete_scope` are where every route, MCP tool and delete gets its `Scope`.
"""
