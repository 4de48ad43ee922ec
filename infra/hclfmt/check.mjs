// `terraform fmt -check -diff` without a terraform binary.
//
// terraform fmt parses each file with hclwrite, applies two Terraform-specific
// rewrites (interpolation-only strings "${x}" -> x, and legacy quoted type
// constraints "string" -> string) and then runs hclwrite.Format. This script
// runs the same hclwrite.Format, compiled to WebAssembly by @cdktf/hcl-tools,
// and reports the two rewrites as errors instead of making them, so a file it
// accepts is one terraform fmt would leave unchanged.
//
// usage: node check.mjs [--write] PATH...   (files or directories; directories
//        are scanned for *.tf, *.tfvars and *.tfvars.example, not recursively)
// exit:  0 clean, 1 a file needs formatting, 2 usage or I/O error.

import { readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { format } from "@cdktf/hcl-tools";

const HCL_FILE = /\.(tf|tfvars|tfvars\.example)$/;

function collect(paths) {
  const files = [];
  for (const p of paths) {
    if (statSync(p).isDirectory()) {
      for (const name of readdirSync(p).sort()) {
        if (HCL_FILE.test(name)) files.push(join(p, name));
      }
    } else {
      files.push(p);
    }
  }
  return files;
}

// A small line diff: enough to show which lines terraform fmt would change.
function diff(before, after) {
  const a = before.split("\n");
  const b = after.split("\n");
  const out = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && a[i] === b[j]) {
      i++;
      j++;
      continue;
    }
    // Find the next line both sides share again.
    let resync = null;
    for (let k = 0; k < 50 && resync === null; k++) {
      for (let l = 0; l <= k; l++) {
        if (i + l < a.length && j + k - l < b.length && a[i + l] === b[j + k - l] && a[i + l].trim() !== "") {
          resync = [i + l, j + k - l];
          break;
        }
      }
    }
    const [ni, nj] = resync ?? [a.length, b.length];
    for (; i < ni; i++) out.push(`-${i + 1}: ${a[i]}`);
    for (; j < nj; j++) out.push(`+${j + 1}: ${b[j]}`);
  }
  return out.join("\n");
}

// The rewrites terraform fmt makes on top of hclwrite.Format.
function terraformRewrites(src) {
  const problems = [];
  src.split("\n").forEach((line, n) => {
    const code = line.replace(/^\s*(#|\/\/).*$/, "");
    if (/=\s*"\$\{[^"]*\}"\s*(,|$)/.test(code) && !/"\$\{[^"]*\}[^"]+"|"[^"]+\$\{/.test(code)) {
      problems.push(`${n + 1}: interpolation-only string; terraform fmt unwraps "\${x}" to x`);
    }
    if (/^\s*type\s*=\s*"(string|number|bool|list|map)"\s*$/.test(code)) {
      problems.push(`${n + 1}: quoted type constraint; terraform fmt writes it unquoted`);
    }
  });
  return problems;
}

const args = process.argv.slice(2);
const write = args[0] === "--write";
const paths = write ? args.slice(1) : args;
if (paths.length === 0) {
  console.error("usage: node check.mjs [--write] PATH...");
  process.exit(2);
}

let files;
try {
  files = collect(paths);
} catch (err) {
  console.error(`hclfmt: ${err.message}`);
  process.exit(2);
}
if (files.length === 0) {
  console.error(`hclfmt: no .tf/.tfvars files under ${paths.join(", ")}`);
  process.exit(2);
}

let bad = 0;
for (const file of files) {
  const src = readFileSync(file, "utf8");
  const formatted = await format(src);
  const rewrites = terraformRewrites(src);
  if (formatted !== src) {
    if (write) {
      writeFileSync(file, formatted);
      console.log(`hclfmt: rewrote ${file}`);
    } else {
      bad++;
      console.log(`hclfmt: ${file} is not in terraform fmt style:\n${diff(src, formatted)}`);
    }
  }
  if (rewrites.length > 0) {
    bad++;
    console.log(`hclfmt: ${file}:\n  ${rewrites.join("\n  ")}`);
  }
}
console.log(`hclfmt: ${files.length} file(s) checked, ${bad} need formatting`);
process.exit(bad === 0 ? 0 : 1);
