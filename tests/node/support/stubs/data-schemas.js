/** Stand-in for `@librechat/data-schemas`: a logger that records instead of printing. */
'use strict';

const { state } = require('../state');

/**
 * @param {string} level
 * @returns {(...args: unknown[]) => void}
 */
const record =
  (level) =>
  (...args) => {
    state.logs.push({ level, args: args.map((arg) => (typeof arg === 'string' ? arg : JSON.stringify(arg))) });
  };

const logger = {
  debug: record('debug'),
  info: record('info'),
  warn: record('warn'),
  error: record('error'),
};

module.exports = { logger };
