// Summarises the JSON results of the HTTP cache test suite (the current
// revision, third_party/cache-tests) with the suite's own classification,
// dependencies honoured (test-engine/lib/results.mjs, determineTestResult),
// as cache-tests.fyi shows it: per kind of test (required, optimal, check),
// how many passed and how each of the others ended; the same for each of
// the suite's published results, on the same tests; per group of tests
// (age-parse, cdn-cache-control, ...) how many of each passed; then the
// required and optimal tests that did not pass, with the suite's note.
//
//	node cache-tests-summary.mjs <suite dir> <results.json> [published-results.json ...]
import fs from 'fs'
import path from 'path'
import { pathToFileURL } from 'url'

const [suiteDir, resultsFile, ...others] = process.argv.slice(2)
if (!suiteDir || !resultsFile) {
  console.error('usage: node cache-tests-summary.mjs <suite dir> <results.json> [published.json ...]')
  process.exit(2)
}
const load = f => import(pathToFileURL(path.join(suiteDir, f)).href)
const tests = (await load('tests/index.mjs')).default
const { determineTestResult, resultTypes } = await load('test-engine/lib/results.mjs')

const kinds = ['required', 'optimal', 'check']
const kindOf = t => t.kind || 'required'
const passed = symbol => symbol === resultTypes.pass[2] || symbol === resultTypes.yes[2]
const all = tests.flatMap(s => s.tests.filter(t => !t.browser_only).map(t => ({ ...t, suite: s.id })))

function score (results) {
  const out = {}
  for (const k of kinds) out[k] = { total: 0, passed: 0, outcomes: {} }
  const groups = {}
  const failed = []
  for (const t of all) {
    if (results[t.id] === undefined) continue
    const symbol = determineTestResult(tests, t.id, results, true)[2]
    const k = out[kindOf(t)]
    const g = (groups[t.suite] ??= Object.fromEntries(kinds.map(k => [k, [0, 0]])))[kindOf(t)]
    k.total++
    g[1]++
    if (passed(symbol)) {
      k.passed++
      g[0]++
    } else {
      k.outcomes[symbol] = (k.outcomes[symbol] || 0) + 1
      if (kindOf(t) !== 'check') failed.push({ t, symbol, note: results[t.id] === true ? '' : (results[t.id][1] || '') })
    }
  }
  return { out, groups, failed }
}

const line = s => kinds.map(k => `${k} ${s.out[k].passed}/${s.out[k].total}`).join(', ')
const mine = score(JSON.parse(fs.readFileSync(resultsFile, 'utf8')))
const legend = '✅ pass, ⛔️ fail, ⚠️ optimal not met, Y/N check, ⚪️ a test it depends on failed, 🔹 setup failed, ⁉️ harness failed, ↻ retry'
console.log(`results: ${resultsFile}`)
for (const k of kinds) {
  const o = mine.out[k]
  const rest = Object.entries(o.outcomes).map(([s, n]) => `${n} ${s}`).join(', ')
  console.log(`  ${k.padEnd(8)} ${String(o.passed).padStart(3)} of ${String(o.total).padStart(3)} passed${rest ? ` (others: ${rest})` : ''}`)
}
console.log(`  (${legend})`)
console.log('published results of this revision, scored the same way:')
for (const f of others) {
  console.log(`  ${path.basename(f, '.json').padEnd(14)} ${line(score(JSON.parse(fs.readFileSync(f, 'utf8'))))}`)
}
console.log('by group (passed/total):')
for (const [id, g] of Object.entries(mine.groups)) {
  console.log(`  ${id.padEnd(22)} ` + kinds.filter(k => g[k][1] > 0).map(k => `${k} ${g[k][0]}/${g[k][1]}`).join(', '))
}
console.log('\nnot passed (required, then optimal):')
for (const kind of ['required', 'optimal']) {
  for (const { t, symbol, note } of mine.failed.filter(f => kindOf(f.t) === kind)) {
    const name = t.name.replace(/\s+/g, ' ')
    console.log(`  ${symbol} ${kind.padEnd(8)} ${t.id}: ${name}${note ? ` [${String(note).replace(/\s+/g, ' ')}]` : ''}`)
  }
}
