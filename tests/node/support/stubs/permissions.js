/** Stand-in for `~/server/services/Files/permissions`: records calls, filters as configured. */
'use strict';

const { state } = require('../state');

/**
 * @param {{files: Object[], userId: string, role?: string, agentId: string}} args
 * @returns {Promise<Object[]>}
 */
async function filterFilesByAgentAccess(args) {
  state.filterCalls.push(args);
  return state.filterImpl ? state.filterImpl(args) : args.files;
}

module.exports = { filterFilesByAgentAccess };
