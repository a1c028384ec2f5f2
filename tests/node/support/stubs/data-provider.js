/** Stand-in for `librechat-data-provider`: the two enums the overlay reads. */
'use strict';

const Tools = { file_search: 'file_search', execute_code: 'execute_code', web_search: 'web_search' };
const EToolResources = { file_search: 'file_search', execute_code: 'execute_code', ocr: 'ocr' };

module.exports = { Tools, EToolResources };
