/**
 * Stand-in for `@librechat/api`: a real HS256 token (as LibreChat signs it: `{id, iat, exp}`, five
 * minutes) so the end-to-end driver can call the real service, and a recording logAxiosError.
 */
'use strict';

const crypto = require('node:crypto');
const { state } = require('../state');
const { logger } = require('./data-schemas');

/**
 * @param {Buffer | string} data
 * @returns {string}
 */
const base64url = (data) => Buffer.from(data).toString('base64url');

/**
 * @param {string} userId
 * @returns {string | null | undefined}
 */
function generateShortLivedToken(userId) {
  if (state.tokenOverride !== undefined) {
    return state.tokenOverride;
  }
  const iat = Math.floor(Date.now() / 1000);
  const header = base64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
  const payload = base64url(JSON.stringify({ id: userId, iat, exp: iat + 300 }));
  const secret = process.env.JWT_SECRET ?? 'node-suite-secret';
  const signature = crypto.createHmac('sha256', secret).update(`${header}.${payload}`).digest('base64url');
  const token = `${header}.${payload}.${signature}`;
  state.tokens.push(token);
  return token;
}

/**
 * @param {{message: string, error: any}} options
 */
function logAxiosError({ message, error }) {
  state.axiosErrors.push({ message, status: error?.response?.status, code: error?.code });
  logger.error(message);
}

module.exports = { generateShortLivedToken, logAxiosError };
