// Renders Mermaid diagrams in the system's Chromium, offline: reads [{name, source}] as JSON on
// stdin, writes NAME.svg (vector, text as SVG text: no foreignObject) and NAME.png (the same
// picture at twice its size) into the folder given as the first argument.
// tools/render_diagrams.py runs it; see there.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
const MERMAID = require.resolve("mermaid/dist/mermaid.min.js");
// Arial's metrics first (Liberation Sans has the same): the labels' boxes are measured here, and
// the SVG is drawn elsewhere with whatever fonts that machine has.
const FONT = "Arial, 'Liberation Sans', Helvetica, sans-serif";
const CONFIG = {
  startOnLoad: false,
  securityLevel: "strict",
  theme: "default",
  htmlLabels: false,
  fontFamily: FONT,
  themeVariables: { fontFamily: FONT },
  sequence: { useMaxWidth: false },
  flowchart: { htmlLabels: false, useMaxWidth: false },
};

const out = process.argv[2];
const diagrams = JSON.parse(readFileSync(0, "utf8"));
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
try {
  const page = await browser.newPage({ deviceScaleFactor: 2 });
  await page.route(/^https?:/, (route) => route.abort()); // everything it needs is local
  await page.setContent('<!doctype html><html><body style="margin:0;background:white"></body></html>');
  await page.addScriptTag({ path: MERMAID });
  for (const { name, source } of diagrams) {
    const svg = await page.evaluate(
      async ({ source, config, name }) => {
        mermaid.initialize(config);
        const { svg } = await mermaid.render(`diagram-${name}`, source);
        document.body.innerHTML = svg;
        const el = document.body.querySelector("svg");
        el.style.backgroundColor = "white"; // readable on a dark theme too
        el.style.display = "block";
        return new XMLSerializer().serializeToString(el);
      },
      { source, config: CONFIG, name },
    );
    if (svg.includes("foreignObject")) throw new Error(`${name}: a label needs HTML (foreignObject)`);
    writeFileSync(join(out, `${name}.svg`), svg);
    await page.locator("body > svg").screenshot({ path: join(out, `${name}.png`) });
    console.log(name);
  }
} finally {
  await browser.close();
}
