// Encode every string of strings.json with the npm package gpt-3-encoder (a JavaScript
// port of GPT-2's encoder.py) and print the ids as JSON: [[ids of string 0], ...].
// Usage: node gpt2_encode.js PATH/TO/gpt-3-encoder strings.json > gpt2_expected.json
const fs = require('fs');
const path = require('path');
const { encode } = require(path.resolve(process.argv[2]));
const strings = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
process.stdout.write('[\n' + strings.map((s) => JSON.stringify(encode(s))).join(',\n') + '\n]\n');
