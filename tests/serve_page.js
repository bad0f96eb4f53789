// Runs the script of tubelet serve's page (the HTML at /) in Node against a running server, with
// a minimal stand-in for the DOM: it lists the models, "chooses" a clip, and must show its top
// labels and plot its timeline. Used by tests/test_serve.sh where Node (>= 18: fetch, FormData,
// File) is installed.  usage: node tests/serve_page.js URL CLIP EXPECTED_LABEL
"use strict";
const fs = require("fs");
const [url, clip, expected] = process.argv.slice(2);

function element(id) {
  return {
    id, value: "", textContent: "", className: "", hidden: false, children: [], listeners: {},
    style: {}, files: [], width: 1000, height: 260,
    classList: { add() {}, remove() {} },
    addEventListener(type, f) { this.listeners[type] = f; },
    replaceChildren(...c) { this.children = c; },
    append(...c) { this.children.push(...c); },
    appendChild(c) { this.children.push(c); },
    getContext() {
      const calls = (this.calls = []);
      return new Proxy({}, { get: (t, k) => (k in t ? t[k] : (...a) => calls.push(k)), set: (t, k, v) => ((t[k] = v), true) });
    },
  };
}
const elements = {};
global.document = {
  getElementById: (id) => (elements[id] = elements[id] || element(id)),
  createElement: (tag) => element(tag),
};
global.Option = function (text, value) { this.textContent = text; this.value = value; };
const base = url.replace(/\/$/, "");
const realFetch = fetch;
global.fetch = (path, init) => realFetch(base + path, init);

(async () => {
  const html = await (await realFetch(base + "/")).text();
  const script = html.slice(html.indexOf("<script>") + 8, html.indexOf("</script>"));
  eval(script);
  const $ = (id) => document.getElementById(id);
  for (let i = 0; i < 100 && !$("model").children.length; i++) await new Promise((r) => setTimeout(r, 50));
  if (!$("model").children.length) throw new Error("no models listed: " + $("status").textContent);
  $("model").value = $("model").children[0].value;
  $("file").files = [new File([fs.readFileSync(clip)], clip.split("/").pop(), { type: "video/mp4" })];
  $("file").listeners.change();
  for (let i = 0; i < 400 && !/window/.test($("status").textContent) && $("status").className !== "error"; i++)
    await new Promise((r) => setTimeout(r, 50));
  const labels = $("labels").children.map((tr) => tr.children[0].textContent);
  if ($("status").className === "error") throw new Error("the page says: " + $("status").textContent);
  if (labels[0] !== expected) throw new Error("top label " + labels[0] + ", want " + expected);
  if ($("plot").hidden || !$("plot").calls.includes("lineTo") && !$("plot").calls.includes("moveTo"))
    throw new Error("no timeline plotted");
  if (!$("legend").children.length) throw new Error("no legend");
  console.log("page: " + labels.join(", ") + "; " + $("status").textContent);
})().catch((e) => { console.error("FAIL: " + e.message); process.exit(1); });
