/**
 * Shared, resettable record of what the module under test did through LibreChat's imports.
 * The stubs write here; the suites read and configure it.
 */
'use strict';

/**
 * @typedef {Object} StubState
 * @property {Array<{level: string, args: unknown[]}>} logs
 * @property {Array<{message: string, status?: number, code?: string}>} axiosErrors
 * @property {Array<unknown[]>} getFilesCalls
 * @property {Array<Object>} filterCalls
 * @property {Array<Object>} db - file records getFiles answers from
 * @property {((args: Object) => Object[]) | null} filterImpl
 * @property {string | null | undefined} tokenOverride - when not undefined, the token returned
 * @property {string[]} tokens
 */

/** @type {StubState} */
const state = {
  logs: [],
  axiosErrors: [],
  getFilesCalls: [],
  filterCalls: [],
  db: [],
  filterImpl: null,
  tokenOverride: undefined,
  tokens: [],
};

/** Restores the empty state between tests. */
function resetState() {
  state.logs = [];
  state.axiosErrors = [];
  state.getFilesCalls = [];
  state.filterCalls = [];
  state.db = [];
  state.filterImpl = null;
  state.tokenOverride = undefined;
  state.tokens = [];
}

/**
 * Log lines at a level, joined into text, for assertions.
 * @param {string} level
 * @returns {string[]}
 */
function logLines(level) {
  return state.logs.filter((entry) => entry.level === level).map((entry) => entry.args.join(' '));
}

module.exports = { state, resetState, logLines };
