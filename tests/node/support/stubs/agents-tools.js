/** Stand-in for `@librechat/agents/langchain/tools`: `tool()` keeps the function and its fields. */
'use strict';

/**
 * @param {(input: {query: string}) => Promise<unknown>} func
 * @param {Object} fields
 * @returns {Object}
 */
function tool(func, fields) {
  return { ...fields, func, invoke: (input) => func(input) };
}

module.exports = { tool };
