// Material's own search, run in node: the search worker the built site serves, with its lunr and
// lunr-languages, ranking queries against one of the built search indexes exactly as the browser
// does (the worker does all of it: Chinese segmentation, wildcards, field boosts, the post-query
// boost of pages over sections, grouping by page).
//
//   node tests/material_search.js SITE INDEX < queries.json > results.json
//
// SITE: the built site's folder; INDEX: its search index, relative to SITE (search/search_index.json
// or zh/search/search_index.json); queries.json: a JSON list of queries. Prints a JSON object:
// query -> {groups, pieces}: groups, the worker's result groups (one per page, in the order the
// results list shows them), each a list of [location, score], best first (a page's own entry is
// last with score 0 when only its sections matched); pieces, the query as the search ran it: the
// terms of its clauses that some result matched (Material's `terms` of each result; a clause
// that matched nothing and is a stop word is left out, as lunr drops those words from the index).
// tests/test_search.py runs it.
"use strict"
const fs = require("fs")
const path = require("path")
const vm = require("vm")

const [site, indexPath] = process.argv.slice(2)
const scripts = path.join(site, "assets", "javascripts")
const workers = path.join(scripts, "workers")
const worker = fs.readdirSync(workers).find(f => /^search\.[0-9a-f]+\.min\.js$/.test(f))
if (!worker) throw new Error(`no search worker in ${workers}`)

// A worker's global scope: the worker imports lunr-languages with importScripts (relative to the
// worker's URL) and answers each message with postMessage.
let listener = null
let answer = null
const scope = {
  console,
  importScripts: (...urls) => {
    for (const url of urls)
      vm.runInContext(fs.readFileSync(path.join(workers, url), "utf8"), scope, { filename: url })
  },
  addEventListener: (type, fn) => { if (type === "message") listener = fn },
  postMessage: message => { answer(message) },
}
scope.self = scope
vm.createContext(scope)
vm.runInContext(fs.readFileSync(path.join(workers, worker), "utf8"), scope, { filename: worker })

function send(message) {
  return new Promise(resolve => {
    answer = resolve
    listener({ data: message })
  })
}

async function main() {
  const index = JSON.parse(fs.readFileSync(path.join(site, indexPath), "utf8"))
  const queries = JSON.parse(fs.readFileSync(0, "utf8"))
  // SETUP = 0, READY = 1, QUERY = 2, RESULT = 3 (integrations/search/worker/message); the page
  // sends the index's config and docs with options.suggest off (this site has no search.suggest)
  const ready = await send({ type: 0, data: { config: index.config, docs: index.docs,
                                              options: { suggest: false } } })
  if (ready.type !== 1) throw new Error(`the worker did not get ready: ${JSON.stringify(ready)}`)
  const out = {}
  for (const query of queries) {
    const result = await send({ type: 2, data: query })
    const groups = result.data.items
    const pieces = new Set()
    for (const group of groups)
      for (const item of group)
        for (const [term, matched] of Object.entries(item.terms))
          if (matched) pieces.add(term)
    out[query] = {
      groups: groups.map(group => group.map(item => [item.location, item.score])),
      pieces: [...pieces],
    }
  }
  process.stdout.write(JSON.stringify(out))
}

main().catch(err => { console.error(err); process.exit(1) })
