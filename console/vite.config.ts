// Builds the console into exactly three files that the gateway embeds and
// serves: dist/index.html at /console, dist/console.js at
// /console/console.js and dist/console.css at /console/console.css.
// Fixed names (no content hashes) and no other assets, so the gateway's
// routes never change and a rebuild of the same sources gives the same bytes.
//
// `npm run dev` serves the sources with the API routes proxied to a running
// gateway (LOCKGATE_URL, default http://127.0.0.1:8080).
import { defineConfig } from "vite";

const gateway = process.env.LOCKGATE_URL ?? "http://127.0.0.1:8080";

export default defineConfig({
  base: "/console/",
  // Nothing is copied verbatim into the build: every icon is inline SVG.
  publicDir: false,
  build: {
    outDir: "dist",
    assetsDir: "",
    emptyOutDir: true,
    // One stylesheet and one script, whatever the sources import.
    cssCodeSplit: false,
    // Nothing would be preloaded (one chunk), and the polyfill adds code.
    modulePreload: false,
    sourcemap: false,
    // Browsers of the last few years; top-level await is not used.
    target: "es2022",
    // Nothing is small enough to become a data: URL, and nothing else is emitted.
    assetsInlineLimit: 0,
    rolldownOptions: {
      output: {
        entryFileNames: "console.js",
        chunkFileNames: "console-[name].js",
        assetFileNames: "console[extname]",
        // Everything in one file: a dynamic import would make a second one.
        codeSplitting: false,
      },
    },
  },
  server: {
    host: "127.0.0.1",
    // The event stream and JSON readers are the TypeScript client's own
    // files, imported from outside this directory: the dev server may serve them.
    fs: { allow: [".", "../clients/typescript/src"] },
    proxy: Object.fromEntries(
      ["/locks", "/seckill", "/healthz", "/readyz"].map((route) => [
        route,
        { target: gateway, changeOrigin: false },
      ]),
    ),
  },
});
