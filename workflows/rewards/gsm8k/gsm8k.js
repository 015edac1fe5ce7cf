// A GSM8K answer-matching reward written in JavaScript, compiled to a rollbox reward
// component with componentize-js (scripts/guests/build-js-component.mjs).
//
// Scoring, the same as the Python reward (workflows/rewards/gsm8k/gsm8k.py): the prediction is
// the last \boxed{...} (or \fbox{...}), else the text after the last `####`, else the last
// number in the completion; the reference is the row's `answer` (the part after `####` when
// it has one). Both are read as numbers (thousands separators, `a/b`, `\frac{a}{b}`) and
// compared to 6 significant digits; 1.0 when they agree, else 0.0.

import { log } from 'rollbox:workflow/log@0.1.2';

const NUMBER = /-?\d[\d,]*(?:\.\d+)?(?:\/\d+)?/g;
const FRAC = /\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}/g;
const THOUSANDS = /(?<=\d),(?=\d{3}(?!\d))/g;
const FRACTION = /^\(?(-?\d+(?:\.\d+)?)\)?(?:\/\(?(-?\d+(?:\.\d+)?)\)?)?$/;

function lastBoxed(text) {
  let start = Math.max(text.lastIndexOf('\\boxed{'), text.lastIndexOf('\\fbox{'));
  if (start < 0) return null;
  start = text.indexOf('{', start) + 1;
  let depth = 1;
  for (let i = start; i < text.length; i++) {
    if (text[i] === '{') depth++;
    else if (text[i] === '}' && --depth === 0) return text.slice(start, i).trim();
  }
  return null;
}

function prediction(completion) {
  const boxed = lastBoxed(completion);
  if (boxed !== null) return boxed;
  const hash = completion.lastIndexOf('####');
  if (hash >= 0) {
    const tail = completion.slice(hash + 4).trim();
    return tail ? tail.split(/\r?\n/)[0] : null;
  }
  const numbers = completion.match(NUMBER);
  return numbers ? numbers[numbers.length - 1] : null;
}

function value(text) {
  let s = text.replaceAll('$', '').replaceAll('\\left', '').replaceAll('\\right', '')
    .replaceAll('\\!', '').trim();
  s = s.replace(FRAC, (_, a, b) => `(${a})/(${b})`);
  s = s.replace(/\.+$/, '').replaceAll(' ', '');
  s = s.replace(THOUSANDS, '');
  const m = FRACTION.exec(s);
  if (!m) return null;
  let num = Number(m[1]);
  if (m[2] !== undefined) {
    const den = Number(m[2]);
    if (den === 0) return null;
    num /= den;
  }
  return num;
}

const same = (a, b) => a === b || a.toExponential(5) === b.toExponential(5);

function scoreText(completion, answer) {
  const hash = answer.lastIndexOf('####');
  if (hash >= 0) answer = answer.slice(hash + 4).trim();
  const pred = prediction(completion);
  if (pred === null) return 0.0;
  const a = value(pred);
  const b = value(answer);
  if (a === null || b === null) return pred.trim() && pred.trim() === answer.trim() ? 1.0 : 0.0;
  return same(a, b) ? 1.0 : 0.0;
}

// An exception for the `err` case of a `result`: its `payload` is the error value (here the
// message), as componentize-js lowers it.
function failure(message) {
  const e = new Error(message);
  e.payload = message;
  return e;
}

// The `reward` world's export: `score(input) -> result<f64, string>`; a thrown `failure` is
// the `err` (retried by the host, then reported to the workflow).
export function score(input) {
  const row = input.data ? JSON.parse(input.data) : {};
  if (row === null || typeof row !== 'object' || row.answer === undefined || row.answer === null) {
    throw failure('the row has no `answer` to check against');
  }
  return scoreText(String(input.completion), String(row.answer));
}
