/** Stand-in for `~/models`: getFiles answers `{file_id: {$in: ids}}` from `state.db`. */
'use strict';

const { state } = require('../state');

/**
 * @param {{file_id: {$in: string[]}}} filter
 * @param {unknown} sort
 * @param {unknown} projection
 * @returns {Promise<Object[]>}
 */
async function getFiles(filter, sort, projection) {
  state.getFilesCalls.push([filter, sort, projection]);
  const wanted = new Set(filter?.file_id?.$in ?? []);
  return state.db.filter((file) => wanted.has(file.file_id));
}

module.exports = { getFiles };
