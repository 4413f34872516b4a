// End-to-end test of the Live Stats page (S-OB1..3, S-MT) in Debian's headless Chromium.
//
// Usage: node livestats.spec.mjs URL [--backend NAME] [--expect NAME=HEALTH,...]
//                                    [--traffic N] [--screenshot FILE]
//                                    [--load VSERVICE] [--dns DNS/NAME=ADDRESS] [--settle S]
//                                    [--history VSERVICE] [--standby VS/LIST/NAME]
//                                    [--drained VS/LIST/NAME]
// (--traffic N: the backends' totals must add up to at least N connections/requests.
//  --load VS: HTTP load runs through VS meanwhile: its requests/s must rise above 0 and
//  move, its sparkline and the overview chart must have points, 2xx answers must show,
//  and every checked backend its last check, duration and time in state (S-OB1, S-OB3).
//  --dns: the DNS vService's name must show ADDRESS as its current answer.
//  --settle S: seconds the page stays open under load before the screenshot.
//  --history VS: the daemon has served VS for several seconds before the page opened: its
//  first render must show them (sparkline and overview chart with points, no "…" rate).
//  --standby / --drained: that member of that list must read "standby" (a backup not in
//  use) or "drained" (weight 0), in the page and in the API.)
// URL is the page served by a running `lb` daemon (e.g. http://127.0.0.1:9180/). The test
// loads it, waits for the backend rows, checks every health badge against the API (and the
// --expect list), simulates an API outage to check the error banner, toggles Maintenance of
// one backend (default: a healthy main whose list has no other eligible main, so the tier
// must change), waits for the amber marker and the tier change, opens the transitions view
// and checks the canvas chart was drawn, toggles Maintenance off again and waits for the
// page to return to its first state. Exit 0 on success, 1 with a message on any failure.
import { chromium } from "playwright-core";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const OVERALL_TIMEOUT_MS = 120_000;
const STEP_TIMEOUT_MS = 20_000;
const CHROMIUM = process.env.CHROMIUM_BIN || "/usr/bin/chromium";
const HERE = dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
  const out = {
    url: null,
    backend: null,
    expect: {},
    traffic: 0,
    load: null,
    dns: null,
    settle: 0,
    history: null,
    standby: null,
    drained: null,
    screenshot: resolve(HERE, "../../target/ui-livestats.png"),
  };
  for (let i = 0; i < argv.length; i += 1) {
    const a = argv[i];
    if (a === "--backend") out.backend = argv[++i];
    else if (a === "--traffic") out.traffic = Number(argv[++i]);
    else if (a === "--screenshot") out.screenshot = resolve(argv[++i]);
    else if (a === "--load") out.load = argv[++i];
    else if (a === "--settle") out.settle = Number(argv[++i]);
    else if (a === "--history") out.history = argv[++i];
    else if (a === "--standby") out.standby = argv[++i];
    else if (a === "--drained") out.drained = argv[++i];
    else if (a === "--dns") {
      const m = /^([^/]+)\/([^=]+)=(.+)$/.exec(argv[++i] || "");
      if (!m) throw new Error("--dns wants DNS/NAME=ADDRESS");
      out.dns = { vs: m[1], name: m[2], address: m[3] };
    }
    else if (a === "--expect") {
      for (const pair of (argv[++i] || "").split(",").filter(Boolean)) {
        const [name, health] = pair.split("=");
        out.expect[name] = health;
      }
    } else if (!out.url) out.url = a;
    else throw new Error(`unexpected argument ${a}`);
  }
  if (!out.url) throw new Error("usage: node livestats.spec.mjs URL [--backend NAME] [--expect N=H,...]");
  return out;
}

const log = (msg) => console.log(`[livestats] ${msg}`);

function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

/** Polls `fn` (async, returns a truthy value when done) until it succeeds or time runs out. */
async function until(what, fn, timeoutMs = STEP_TIMEOUT_MS) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ""}`);
}

/** The live payload, fetched from inside the page (same origin, same token). */
function live(page) {
  return page.evaluate(async () => {
    const h = {};
    const t = localStorage.getItem("lb.apiToken");
    if (t) h.Authorization = `Bearer ${t}`;
    const r = await fetch("/api/v1/stats/live", { headers: h, cache: "no-store" });
    if (!r.ok) throw new Error(`stats/live answered ${r.status}`);
    return r.json();
  });
}

const byTestId = (page, id) => page.locator(`[data-testid="${id}"]`);

/** Lists (vservice, list) where `name` is an eligible main, and whether it is the only one. */
function listsServedAsMain(data, name) {
  const out = [];
  for (const vs of data.vservices || []) {
    for (const list of vs.lists || []) {
      const me = (list.members || []).find((m) => m.name === name && m.role === "main");
      if (!me || me.state !== "eligible") continue;
      const others = list.members.filter((m) => m.role === "main" && m.name !== name && m.state === "eligible");
      out.push({ vs: vs.name, list: list.name, tier: list.tier, sole: others.length === 0 });
    }
  }
  return out;
}

function pickBackend(data, wanted) {
  if (wanted) return wanted;
  const healthy = (data.backends || []).filter((b) => b.health === "OK" && !b.maintenance);
  check(healthy.length > 0, "no healthy backend without maintenance to toggle");
  const sole = healthy.find((b) => listsServedAsMain(data, b.name).some((l) => l.sole));
  return (sole || healthy[0]).name;
}

async function checkHealthBadges(page, expect, expectTraffic, lag) {
  const data = await live(page);
  check((data.backends || []).length > 0, "the API reports no Backend Services");
  for (const [name, health] of Object.entries(expect)) {
    const b = data.backends.find((x) => x.name === name);
    check(b, `expected backend ${name} is not in the API answer`);
    check(b.health === health, `API: ${name} health is ${b.health}, expected ${health}`);
  }
  const colours = { OK: [31, 157, 85], Error: [214, 69, 69], Preparing: [138, 147, 158] };
  for (const b of data.backends) {
    const badge = byTestId(page, `health-${b.name}`);
    const text = (await badge.textContent()).trim();
    check(text === b.health, `badge of ${b.name} says ${text}, the API says ${b.health}`);
    const bg = await badge.evaluate((e) => getComputedStyle(e).backgroundColor);
    const want = colours[b.health];
    check(want, `unknown health ${b.health} for ${b.name}`);
    check(bg === `rgb(${want.join(", ")})`, `badge of ${b.name} (${b.health}) has colour ${bg}`);
    // Counters as the API reports them ("–" where the backend has none, e.g. in no vService).
    const total = (await byTestId(page, `total-${b.name}`).textContent()).trim();
    const want_total = b.total ?? b.new_flows;
    const shown = want_total === null || want_total === undefined ? "–" : Number(want_total).toLocaleString("en-US");
    if (lag > 0 && shown !== "–" && total !== "–") {
      // Under load the page shows the poll before this fetch: a little behind, never ahead.
      const behind = Number(want_total) - Number(total.replace(/,/g, ""));
      check(behind >= 0 && behind <= lag, `total of ${b.name}: page ${total}, API ${shown}`);
    } else {
      check(total === shown, `total of ${b.name}: page ${total}, API ${shown}`);
    }
  }
  const sum = data.backends.reduce((acc, b) => acc + Number(b.total ?? 0), 0);
  check(sum >= expectTraffic, `backends total ${sum}, expected at least ${expectTraffic}`);
  return data;
}

/** Points of the first polyline in an SVG (or of the polyline itself). */
function polylinePoints(locator) {
  return locator.evaluate((node) => {
    const line = node.tagName.toLowerCase() === "polyline" ? node : node.querySelector("polyline");
    const pts = line ? (line.getAttribute("points") || "").trim() : "";
    return pts ? pts.split(/\s+/).length : 0;
  });
}

/**
 * S-OB1, S-OB3 under load: the vService's requests/s rises above 0 and moves, its sparkline and
 * the overview chart have points, 2xx answers show, and each checked backend shows its last
 * check (result and duration) and the time in its state.
 */
async function checkRates(page, vs, data) {
  const rate = async () => Number((await byTestId(page, `rate-${vs}`).getAttribute("data-rate")) || 0);
  const seen = [];
  await until(`requests/s of ${vs} above 0 and moving`, async () => {
    const r = await rate();
    if (r > 0 && seen[seen.length - 1] !== r) seen.push(r);
    return seen.length >= 3 && new Set(seen.map((x) => x.toFixed(1))).size >= 2;
  }, 40_000);
  log(`${vs} requests/s seen: ${seen.map((x) => x.toFixed(1)).join(", ")}`);
  const shown = (await byTestId(page, `rate-${vs}`).textContent()).trim();
  check(/^[0-9.,]+[kM]?$/.test(shown), `rate of ${vs} reads ${shown}`);

  const spark = byTestId(page, `spark-${vs}`);
  const sparkPoints = await until(`a sparkline of ${vs} with 3 points`, async () => {
    const n = await polylinePoints(spark);
    return n >= 3 ? n : null;
  }, 30_000);
  const overviewPoints = await polylinePoints(byTestId(page, "overview-l7-requests"));
  check(overviewPoints >= 3, `the overview chart has ${overviewPoints} points`);
  const total = Number((await byTestId(page, "sum-requests").locator(".tile-value").getAttribute("data-value")) || 0);
  check(total > 0, `the summary shows ${total} requests/s under load`);
  log(`charts: sparkline ${sparkPoints} points, overview ${overviewPoints} points, summary ${total.toFixed(1)} req/s`);

  // The page's own rate code: a counter that goes down (a daemon restart) gives 0, never a
  // negative rate, and two polls a few ms apart do not divide by almost nothing.
  const edge = await page.evaluate(() => {
    const r = new window.LbCharts.Rates();
    r.observe(1000, "x", 100);
    const normal = r.observe(2000, "x", 150);
    const close = r.observe(2004, "x", 190);
    const reset = r.observe(3000, "x", 7);
    const after = r.observe(4000, "x", 27);
    return { normal, close, reset, after };
  });
  check(edge.normal === 50 && edge.close === 50 && edge.reset === 0 && edge.after === 20, `rates: ${JSON.stringify(edge)}`);

  const num = (t) => Number(String(t).replace(/[^0-9.]/g, ""));
  await until(`2xx answers of ${vs}`, async () => num(await byTestId(page, `class-${vs}-2xx`).textContent()) > 0);
  await until(`4xx answers of ${vs}`, async () => num(await byTestId(page, `class-${vs}-4xx`).textContent()) > 0);
  log(`${vs}: ${(await byTestId(page, `classes-${vs}`).textContent()).replace(/\s+/g, " ")}`);

  for (const b of data.backends.filter((x) => x.health_check)) {
    const cell = byTestId(page, `check-${b.name}`);
    const want = b.health === "OK" ? "passed" : "failed";
    await until(`the last check of ${b.name} (${want})`, async () => {
      const t = await cell.textContent();
      return t.includes(want) && /[0-9] (ms|s)/.test(t);
    });
    const since = (await byTestId(page, `since-${b.name}`).textContent()).trim();
    check(/^for [0-9]+[smhd]/.test(since), `time in state of ${b.name} reads ${since}`);
    log(`${b.name}: ${b.health} ${since}; last check: ${(await cell.textContent()).trim()}`);
  }
}

/**
 * S-OB1 on a daemon that served `vs` before the page opened: the first render (one poll,
 * two at most) already shows the minutes the daemon sampled: the sparkline of `vs` and the
 * overview chart have points, and no rate reads "…" (a rate waiting for a second poll).
 */
async function checkFirstRender(page, vs) {
  const seen = await page.evaluate((name) => {
    const q = (id) => document.querySelector(`[data-testid="${id}"]`);
    const points = (node) => Number(node?.getAttribute("data-points") || 0);
    const waiting = [...document.querySelectorAll('#summary .tile, [data-testid^="rate-"]')]
      .filter((n) => n.textContent.includes("…"))
      .map((n) => `${n.getAttribute("data-testid")}: ${n.textContent.trim()}`);
    return {
      polls: Number(q("last-refresh")?.dataset.polls || 0),
      spark: points(q(`spark-${name}`)),
      overview: points(q("overview-l7-requests")),
      rate: q(`rate-${name}`)?.textContent,
      waiting,
    };
  }, vs);
  log(`first render: ${JSON.stringify(seen)}`);
  check(seen.polls >= 1 && seen.polls <= 2, `checked after ${seen.polls} polls, not right after opening`);
  check(seen.spark >= 3, `the sparkline of ${vs} has ${seen.spark} points on opening`);
  check(seen.overview >= 3, `the overview chart has ${seen.overview} points on opening`);
  check(seen.waiting.length === 0, `rates still waiting on opening: ${seen.waiting.join("; ")}`);
}

/**
 * S-BK1, S-BK11: the member `spec` (VS/LIST/NAME) reads `want` in the API and in the page,
 * "standby" for a backup not in use and "drained" only for weight 0.
 */
async function checkMemberState(page, data, spec, want) {
  const [vs, list, name] = spec.split("/");
  const api = (data.vservices || []).find((v) => v.name === vs)?.lists?.find((l) => l.name === list)?.members?.find((m) => m.name === name);
  check(api?.state === want, `API: ${name} in ${vs}/${list} is ${api?.state}, expected ${want}`);
  const member = byTestId(page, `member-${vs}-${list}-${name}`);
  const text = (await member.textContent()).replace(/\s+/g, " ").trim();
  const other = want === "standby" ? "drained" : "standby";
  check(text.includes(want) && !text.includes(other), `page: ${name} in ${vs}/${list} reads "${text}", expected ${want}`);
  check((await member.getAttribute("class")).split(/\s+/).includes(want), `page: ${name} in ${vs}/${list} lacks class ${want}`);
  log(`${vs}/${list}: "${text}"`);
}

/** The DNS vService's name shows its current answer, its policy and counters. */
async function checkDns(page, dns) {
  const id = `${dns.vs}-${dns.name}`;
  await until(`the answer of ${dns.name} to show ${dns.address}`, async () =>
    (await byTestId(page, `dns-answer-${id}`).textContent()).includes(dns.address), 30_000);
  const policy = (await byTestId(page, `dns-policy-${id}`).textContent()).trim();
  check(policy.startsWith("round-robin"), `policy of ${dns.name} reads ${policy}`);
  const queries = Number((await byTestId(page, `dns-counter-${dns.vs}-queries`).textContent()).replace(/[^0-9]/g, ""));
  check(queries > 0, `the DNS vService ${dns.vs} shows ${queries} queries`);
  log(`${dns.name} answers ${dns.address} now (${policy}); ${queries} queries`);
}

async function tierOf(page, vs, list) {
  return ((await byTestId(page, `tier-${vs}-${list}`).textContent()) || "").trim();
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const profile = mkdtempSync(join(tmpdir(), "lb-ui-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  try {
    const page = context.pages()[0] || (await context.newPage());
    const pageErrors = [];
    page.on("pageerror", (e) => pageErrors.push(e.message));
    const token = process.env.LB_TOKEN;
    if (token) {
      // A browser cannot add a Bearer header to a page load: the test adds it to the static
      // files only. API calls must carry the token the operator types into the page.
      await page.route("**/*", (route) => {
        const url = new URL(route.request().url());
        if (url.pathname.startsWith("/api/")) return route.continue();
        return route.continue({ headers: { ...route.request().headers(), authorization: `Bearer ${token}` } });
      });
    }
    page.setDefaultTimeout(STEP_TIMEOUT_MS);

    log(`loading ${args.url}`);
    await page.goto(args.url, { waitUntil: "load" });
    if (token) {
      // Without a token the API refuses: the banner says so. With a wrong one too; with the
      // right one (kept in localStorage) the banner goes and the page fills in.
      const banner = byTestId(page, "error-banner");
      await banner.waitFor({ state: "visible" });
      check((await banner.textContent()).includes("401"), `banner without token: ${await banner.textContent()}`);
      await byTestId(page, "token").fill("wrong-token");
      await byTestId(page, "token").press("Enter");
      await until("a 401 banner for the wrong token", async () =>
        (await banner.textContent()).includes("wrong token"),
      );
      await byTestId(page, "token").fill(token);
      await byTestId(page, "token").press("Enter");
      await banner.waitFor({ state: "hidden" });
      const stored = await page.evaluate(() => localStorage.getItem("lb.apiToken"));
      check(stored === token, "the token was not kept in localStorage");
      log("token: 401 banner without/with a wrong token, cleared with the right one");
    }
    await page.locator('[data-testid^="backend-row-"]').first().waitFor();
    if (args.history) await checkFirstRender(page, args.history);
    log(`backend rows: ${await page.locator('[data-testid^="backend-row-"]').count()}`);

    // Health badges match the API, with the right colours, once the expected states are in.
    let data = await until(
      `health ${JSON.stringify(args.expect)} in the page`,
      () => checkHealthBadges(page, args.expect, args.traffic, args.load ? 400 : 0),
      45_000,
    );
    if (args.standby) await checkMemberState(page, data, args.standby, "standby");
    if (args.drained) await checkMemberState(page, data, args.drained, "drained");
    const target = pickBackend(data, args.backend);
    const before = listsServedAsMain(data, target);
    log(`toggling ${target}; served as main in ${JSON.stringify(before)}`);
    for (const l of before) {
      check((await tierOf(page, l.vs, l.list)) === l.tier, `tier of ${l.vs}/${l.list} differs from the API`);
    }

    // The banner shows when the API fails, and goes away when it answers again.
    check(await byTestId(page, "error-banner").isHidden(), "error banner visible while the API works");
    await page.route("**/api/v1/stats/live", (route) =>
      route.fulfill({ status: 503, contentType: "application/json", body: '{"error":"simulated outage"}' }),
    );
    await byTestId(page, "error-banner").waitFor({ state: "visible" });
    const bannerText = await byTestId(page, "error-banner").textContent();
    check(bannerText.includes("simulated outage") && bannerText.includes("503"), `banner text: ${bannerText}`);
    await page.unroute("**/api/v1/stats/live");
    await byTestId(page, "error-banner").waitFor({ state: "hidden" });
    log("error banner shown on a failing API and hidden after recovery");

    // The last-refresh time moves on.
    const stamp = async () => Number(await byTestId(page, "last-refresh").getAttribute("data-unix-ms"));
    const s0 = await stamp();
    await until("the last refresh time to advance", async () => (await stamp()) > s0);

    if (args.load) await checkRates(page, args.load, data);
    if (args.dns) await checkDns(page, args.dns);
    if (args.load || args.dns) {
      // Let the charts fill for a while under load, as an operator would see them.
      await page.waitForTimeout(args.settle * 1000);
      mkdirSync(dirname(args.screenshot), { recursive: true });
      await page.screenshot({ path: args.screenshot, fullPage: true });
      log(`screenshot under load: ${args.screenshot}`);
    }

    // Maintenance on: the amber marker, the member in maintenance, and the tier moves off "mains"
    // wherever the backend was the only eligible main.
    const toggle = byTestId(page, `maint-toggle-${target}`);
    check((await toggle.textContent()).trim() === "Maintenance on", "toggle does not offer Maintenance on");
    await toggle.click();
    const marker = byTestId(page, `maint-${target}`);
    await marker.waitFor({ state: "visible" });
    check((await marker.textContent()).trim() === "Maintenance", "marker text is not Maintenance");
    check(await marker.evaluate((e) => e.classList.contains("maint")), "marker lacks class maint");
    const amber = await marker.evaluate((e) => getComputedStyle(e).backgroundColor);
    check(amber === "rgb(240, 165, 0)", `maintenance marker is not amber: ${amber}`);
    for (const l of before) {
      // S-MT1: it reads "maintenance", neither eligible nor "drained" (weight 0 only).
      await until(`${target} in maintenance in ${l.vs}/${l.list}`, async () => {
        const member = byTestId(page, `member-${l.vs}-${l.list}-${target}`);
        const cls = await member.getAttribute("class");
        return !cls.includes("eligible") && (await member.textContent()).includes("maintenance");
      });
      if (l.sole) {
        await until(`tier of ${l.vs}/${l.list} to leave "mains"`, async () => (await tierOf(page, l.vs, l.list)) !== "mains");
        log(`tier of ${l.vs}/${l.list}: ${l.tier} -> ${await tierOf(page, l.vs, l.list)}`);
      } else {
        check((await tierOf(page, l.vs, l.list)) === "mains", `${l.vs}/${l.list} left mains though other mains remain`);
      }
    }
    data = await live(page);
    check(data.backends.find((b) => b.name === target).maintenance === true, "API does not show maintenance on");
    log(`${target}: amber Maintenance marker shown`);

    // Transitions view: the table matches the API and the canvas holds drawn check points.
    await byTestId(page, `backend-link-${target}`).click();
    await byTestId(page, "transitions-view").waitFor({ state: "visible" });
    check((await byTestId(page, "transitions-name").textContent()) === target, "transitions view shows another backend");
    const canvas = byTestId(page, "checks-chart");
    await until("check points on the chart", async () => Number(await canvas.getAttribute("data-points")) > 0);
    const pixels = await canvas.evaluate((c) => {
      const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      let nonWhite = 0;
      let green = 0;
      for (let i = 0; i < d.length; i += 4) {
        if (d[i] < 250 || d[i + 1] < 250 || d[i + 2] < 250) nonWhite += 1;
        if (d[i + 1] > 130 && d[i] < 80 && d[i + 2] < 120) green += 1;
      }
      return { nonWhite, green, total: d.length / 4 };
    });
    log(`canvas: ${JSON.stringify(pixels)}`);
    check(pixels.nonWhite > 500, "the chart canvas is blank");
    check(pixels.green > 10, "no passed-check points drawn on the chart");
    const transitionsOf = (name) =>
      page.evaluate(async (n) => {
        const h = {};
        const t = localStorage.getItem("lb.apiToken");
        if (t) h.Authorization = `Bearer ${t}`;
        const r = await fetch(`/api/v1/backends/${encodeURIComponent(n)}/transitions`, { headers: h });
        if (!r.ok) throw new Error(`transitions answered ${r.status}`);
        return r.json();
      }, name);
    const tr = await until("the transitions table to match the API", async () => {
      const api = await transitionsOf(target);
      const rows = await page.locator('[data-testid="transition-row"]').count();
      return rows === (api.transitions || []).length ? api : null;
    });
    log(`transitions: ${(tr.transitions || []).length}, checks: ${(tr.checks || []).length}`);

    const shot = args.load || args.dns ? args.screenshot.replace(/\.png$/, "-transitions.png") : args.screenshot;
    mkdirSync(dirname(shot), { recursive: true });
    await page.screenshot({ path: shot, fullPage: true });
    log(`screenshot: ${shot}`);

    // Maintenance off: the marker goes and the tiers come back.
    await page.evaluate(() => window.scrollTo(0, 0));
    await until("the toggle to offer Maintenance off", async () => (await toggle.textContent()).trim() === "Maintenance off" && (await toggle.isEnabled()));
    await toggle.click();
    await marker.waitFor({ state: "detached" });
    for (const l of before) {
      await until(`tier of ${l.vs}/${l.list} back to ${l.tier}`, async () => (await tierOf(page, l.vs, l.list)) === l.tier);
    }
    data = await live(page);
    check(data.backends.find((b) => b.name === target).maintenance === false, "API still shows maintenance on");
    log(`${target}: Maintenance off, tiers restored`);

    check(pageErrors.length === 0, `JavaScript errors on the page: ${pageErrors.join("; ")}`);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

const timer = setTimeout(() => {
  console.error(`[livestats] FAILED: overall timeout of ${OVERALL_TIMEOUT_MS} ms`);
  process.exit(1);
}, OVERALL_TIMEOUT_MS);

main().then(
  () => {
    clearTimeout(timer);
    console.log("[livestats] PASSED");
    process.exit(0);
  },
  (e) => {
    clearTimeout(timer);
    console.error(`[livestats] FAILED: ${e.message}`);
    process.exit(1);
  },
);
