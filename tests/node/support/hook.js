/**
 * Require hook: resolves LibreChat's imports to local stand-ins so the overlay module runs outside
 * LibreChat. `axios` stays real (from tests/node/node_modules) and talks to a local server.
 * Require this file before the module under test.
 */
'use strict';

const Module = require('node:module');
const path = require('node:path');

const NODE_DIR = path.resolve(__dirname, '..');
const STUB_DIR = path.join(__dirname, 'stubs');

/** Module path of the overlay under test. */
const MODULE_PATH = path.resolve(NODE_DIR, '..', '..', 'patches', 'librechat', 'fileSearch.js');

/** @type {Record<string, string>} LibreChat import -> stand-in file */
const STUBS = {
  '@librechat/data-schemas': path.join(STUB_DIR, 'data-schemas.js'),
  '@librechat/agents/langchain/tools': path.join(STUB_DIR, 'agents-tools.js'),
  '@librechat/api': path.join(STUB_DIR, 'api.js'),
  'librechat-data-provider': path.join(STUB_DIR, 'data-provider.js'),
  '~/server/services/Files/permissions': path.join(STUB_DIR, 'permissions.js'),
  '~/models': path.join(STUB_DIR, 'models.js'),
};

// The overlay lives outside tests/node, so Node would not look in our node_modules for axios.
const AXIOS_PATH = require.resolve('axios', { paths: [NODE_DIR] });

const originalResolve = Module._resolveFilename;
Module._resolveFilename = function resolveWithStubs(request, ...rest) {
  if (Object.prototype.hasOwnProperty.call(STUBS, request)) {
    return STUBS[request];
  }
  if (request === 'axios') {
    return AXIOS_PATH;
  }
  if (request.startsWith('~/')) {
    // Any other LibreChat-internal import means the overlay grew a dependency the stubs miss.
    throw new Error(`no stand-in for LibreChat import ${request}`);
  }
  return originalResolve.call(this, request, ...rest);
};

module.exports = { MODULE_PATH };
