// Front-end build: copy the pinned chart library's distribution files from node_modules into
// static/vendor/, where Django's staticfiles (and WhiteNoise) serve them. Run by `npm run build`
// after `npm ci`; scripts/setup.sh does both. The copied files are build output (gitignored).
import { copyFileSync, mkdirSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const files = [
  // [source under node_modules, destination under static/vendor]
  ["echarts/dist/echarts.min.js", "echarts/echarts.min.js"],
  ["echarts/LICENSE", "echarts/LICENSE"],
  ["echarts/NOTICE", "echarts/NOTICE"],  // Apache-2.0: the NOTICE travels with the code
];
for (const [src, dst] of files) {
  const from = join(here, "node_modules", src);
  const to = join(here, "static", "vendor", dst);
  if (!existsSync(from)) {
    console.error(`missing ${from}: run \`npm ci\` in frontend/ first`);
    process.exit(1);
  }
  mkdirSync(dirname(to), { recursive: true });
  copyFileSync(from, to);
  console.log(`copied ${src} -> static/vendor/${dst}`);
}
