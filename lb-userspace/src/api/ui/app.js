// Live Stats page of lb (S-OB1..3). Vanilla JS, no build step, no external resources.
// Polls GET /api/v1/stats/live every second and turns counter deltas into rates
// (charts.js), starting from the last minutes of rates the daemon sampled before the page
// opened (the first poll asks for them with ?history=1): a summary with an overview chart,
// the vServices (rates with a sparkline of the last minutes (up to 5), status classes,
// errors, lists with their active tier and each member's state), the Backend Services
// (health and time in it, last check, counters and rates, Maintenance/Backup markers,
// "used in"), the DNS vServices (what each name answers now, its policy, counters);
// toggles Maintenance through the API, and shows a backend's health check transitions
// with a canvas chart of check durations.
(() => {
  "use strict";

  const REFRESH_MS = 1000;
  const REQUEST_TIMEOUT_MS = 4000;
  const TOKEN_KEY = "lb.apiToken";
  // How long a toggle button stays disabled waiting for the live data to show the change.
  const TOGGLE_SETTLE_MS = 5000;

  const { Rates, sparkline, overview, windowFor } = window.LbCharts;
  const rates = new Rates();

  const state = {
    selected: null, // backend whose transitions are shown
    now: Date.now(), // generated_unix_ms of the latest payload
    firstPoll: null, // when the charts' history starts: the daemon's oldest sample, else the first payload
    seeded: false, // the daemon's history was taken (asked for until a poll succeeds)
    polls: 0, // successful polls since the page opened
    window: 60000, // the span the charts show
    backendsByName: new Map(),
    vsByName: new Map(),
    pending: new Map(), // backend name -> {want: bool, until: ms}
    errors: { refresh: null, transitions: null, action: null },
    actionErrorTimer: null,
  };

  const $ = (id) => document.getElementById(id);

  // ----- small DOM helpers (text only: never innerHTML with API data) --------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function setText(node, text) {
    const t = String(text);
    if (node.textContent !== t) node.textContent = t;
  }

  function setTitle(node, title) {
    if (node.title !== title) node.title = title;
  }

  /** Replaces a node's children only when their rendered text would change. */
  function setChildren(node, children) {
    const probe = el("div", {}, ...children);
    if (probe.innerHTML !== node.innerHTML) node.replaceChildren(...probe.childNodes);
  }

  // ----- formatting -----------------------------------------------------------------------

  // One formatter for every number: toLocaleString builds one per call, which 10,000
  // backend rows a second make the page's main cost.
  const NUMBER = new Intl.NumberFormat("en-US");

  function fmtNum(n) {
    if (n === undefined || n === null || Number.isNaN(Number(n))) return "–";
    return NUMBER.format(Number(n));
  }

  function fmtBytes(n) {
    if (n === undefined || n === null || Number.isNaN(Number(n))) return "–";
    let v = Number(n);
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i += 1;
    }
    return i === 0 ? `${v} B` : `${v.toFixed(v >= 100 ? 0 : 1)} ${units[i]}`;
  }

  function fmtTime(ms) {
    if (!ms && ms !== 0) return "–";
    const d = new Date(Number(ms));
    const pad = (x, w = 2) => String(x).padStart(w, "0");
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  }

  function fmtDateTime(ms) {
    const d = new Date(Number(ms));
    const pad = (x) => String(x).padStart(2, "0");
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${fmtTime(ms)}`;
  }

  /** Whole milliseconds from the API: a check faster than 1 ms reads "< 1 ms", not "0 ms". */
  function fmtCheckMs(ms) {
    if (ms === undefined || ms === null) return "–";
    return Number(ms) < 1 ? "< 1 ms" : `${fmtNum(ms)} ms`;
  }

  /** A per-second rate: "0", "3.4", "1,234", "12.3k", "4.5M". */
  function fmtRate(r) {
    if (r === undefined || r === null || !Number.isFinite(r)) return "–";
    if (r === 0) return "0";
    if (r >= 1e6) return `${(r / 1e6).toFixed(r >= 1e7 ? 0 : 1)}M`;
    if (r >= 1e4) return `${(r / 1e3).toFixed(r >= 1e5 ? 0 : 1)}k`;
    if (r >= 100) return NUMBER.format(Math.round(r));
    return r.toFixed(r >= 10 ? 1 : r >= 0.1 ? 2 : 3).replace(/\.?0+$/, "") || "0";
  }

  /** Bytes per second with a binary unit. */
  function fmtBytesRate(r) {
    if (r === undefined || r === null || !Number.isFinite(r)) return "–";
    return `${fmtBytes(Math.round(r))}/s`;
  }

  /** A counter with k/M units when large ("1.2M"), exact below 100,000. */
  function fmtCount(n) {
    if (n === undefined || n === null || Number.isNaN(Number(n))) return "–";
    const v = Number(n);
    if (v >= 1e9) return `${(v / 1e9).toFixed(2)}G`;
    if (v >= 1e6) return `${(v / 1e6).toFixed(2)}M`;
    if (v >= 1e5) return `${(v / 1e3).toFixed(1)}k`;
    return NUMBER.format(v);
  }

  /** A duration as operators read it: "45s", "3m12s", "2h05m", "3d4h". */
  function fmtDur(ms) {
    if (ms === undefined || ms === null || !Number.isFinite(ms) || ms < 0) return "–";
    const s = Math.floor(ms / 1000);
    if (s < 60) return `${s}s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m}m${String(s % 60).padStart(2, "0")}s`;
    const h = Math.floor(m / 60);
    if (h < 48) return `${h}h${String(m % 60).padStart(2, "0")}m`;
    return `${Math.floor(h / 24)}d${h % 24}h`;
  }

  /** A check's duration: "0.21 ms", "12 ms", "1.3 s". */
  function fmtCheckDur(ms) {
    if (ms === undefined || ms === null || !Number.isFinite(ms)) return "–";
    if (ms < 1) return `${ms.toFixed(2)} ms`;
    if (ms < 100) return `${ms.toFixed(1)} ms`;
    if (ms < 1000) return `${Math.round(ms)} ms`;
    return `${(ms / 1000).toFixed(1)} s`;
  }

  // address:port as an operator writes it, IPv6 in brackets ([2001:db8::1]:80).
  function hostPort(address, port) {
    const a = address ?? "?";
    const p = port ?? "?";
    return String(a).includes(":") ? `[${a}]:${p}` : `${a}:${p}`;
  }

  function fmtPorts(ports) {
    if (ports === undefined || ports === null) return "any";
    if (!Array.isArray(ports)) return String(ports);
    if (ports.length === 0) return "any";
    return ports
      .map((p) => (p && typeof p === "object" ? `${p.start ?? p.from}-${p.end ?? p.to}` : String(p)))
      .join(",");
  }

  function fmtUsedIn(u) {
    if (typeof u === "string") return u;
    if (!u || typeof u !== "object") return String(u);
    const vs = u.vservice ?? u.name ?? "?";
    return u.list ? `${vs} (${u.list})` : vs;
  }

  function tierClass(tier) {
    const t = String(tier || "none").toLowerCase();
    if (t === "mains") return "mains";
    if (t.startsWith("backup")) return "backup";
    return "none";
  }

  function healthClass(h) {
    const t = String(h || "").toLowerCase();
    return ["ok", "error", "preparing"].includes(t) ? t : "unknown";
  }

  // ----- API ------------------------------------------------------------------------------

  function authHeaders(extra) {
    const h = Object.assign({ Accept: "application/json" }, extra || {});
    const token = localStorage.getItem(TOKEN_KEY);
    if (token) h.Authorization = `Bearer ${token}`;
    return h;
  }

  async function api(path, opts = {}) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), REQUEST_TIMEOUT_MS);
    const method = opts.method || "GET";
    let res;
    try {
      res = await fetch(path, {
        method,
        body: opts.body,
        headers: authHeaders(opts.headers),
        cache: "no-store",
        signal: ctl.signal,
      });
    } catch (e) {
      throw new Error(`${method} ${path}: ${e.name === "AbortError" ? "timed out" : e.message}`);
    } finally {
      clearTimeout(timer);
    }
    const text = await res.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch (_) {
      body = null;
    }
    if (!res.ok) {
      const why = body && body.error ? body.error : text || res.statusText;
      throw new Error(`${method} ${path}: HTTP ${res.status}: ${why}`);
    }
    return body;
  }

  // ----- error banner ---------------------------------------------------------------------

  function renderBanner() {
    const msgs = Object.values(state.errors).filter(Boolean);
    const banner = $("error-banner");
    if (msgs.length === 0) {
      banner.hidden = true;
      banner.textContent = "";
    } else {
      banner.hidden = false;
      setText(banner, `API error: ${msgs.join(" — ")}`);
    }
  }

  function setActionError(msg) {
    state.errors.action = msg;
    clearTimeout(state.actionErrorTimer);
    if (msg) {
      state.actionErrorTimer = setTimeout(() => {
        state.errors.action = null;
        renderBanner();
      }, 10000);
    }
    renderBanner();
  }

  // ----- rates ----------------------------------------------------------------------------

  /** Errors of an L7 vService: 5xx answers, 503s for want of a backend, timeouts, aborts. */
  function l7Errors(c) {
    const r = c.responses || {};
    return Number(r["5xx"] || 0) + Number(c.unavailable || 0) + Number(c.server_timeouts || 0) + Number(c.upstream_aborts || 0);
  }

  /**
   * Seeds the rates with the minutes the daemon sampled before the page opened (the
   * `history` of the first payload), so that the first render already shows rates and
   * charts: an operator opening the page during an incident sees what just happened.
   */
  function seedHistory(live) {
    const h = live.history;
    if (!h || !Array.isArray(h.t) || h.t.length === 0) return;
    const times = h.t.map(Number);
    // Every series ends with the newest sample; a shorter one began later (a reload).
    const points = (values) => {
      const v = Array.isArray(values) ? values : [];
      const off = times.length - v.length;
      return v.slice(Math.max(0, -off)).map((r, i) => ({ t: times[Math.max(0, off) + i], r }));
    };
    for (const v of live.vservices || []) {
      const s = (h.vservices || {})[v.name];
      if (!s) continue;
      const k = `vs:${v.name}:`;
      if (isNetwork(v)) {
        rates.seed(`${k}packets`, points(s.main), true);
        rates.seed(`${k}drops`, points(s.errors), true);
        rates.seed(`${k}flows`, points(s.flows));
        rates.seed(`${k}bytes`, points(s.bytes_in));
        rates.seed(`${k}rby`, points(s.bytes_out));
      } else {
        rates.seed(`${k}requests`, points(s.main), true);
        rates.seed(`${k}errors`, points(s.errors), true);
        rates.seed(`${k}bin`, points(s.bytes_in));
        rates.seed(`${k}bout`, points(s.bytes_out));
      }
    }
    for (const [name, q] of Object.entries(h.dns_vservices || {})) rates.seed(`dns:${name}:queries`, points(q), true);
    for (const key of ["requests", "errors", "packets", "drops"]) rates.seed(`total:${key}`, points((h.total || {})[key]), true);
    // Backend Services: the latest second only (their rows have no chart).
    const newest = times[times.length - 1];
    for (const [name, b] of Object.entries(h.backends || {})) {
      const k = `be:${name}:`;
      rates.seed(`${k}total`, [{ t: newest, r: b.main }]);
      rates.seed(`${k}bin`, [{ t: newest, r: b.bytes_in }]);
      rates.seed(`${k}bout`, [{ t: newest, r: b.bytes_out }]);
      rates.seed(`${k}fail`, [{ t: newest, r: b.errors }]);
    }
    state.firstPoll = times[0];
  }

  /**
   * Rates of every vService, backend and DNS vService since the previous poll, and the
   * totals pushed to the overview's rings. Returns {vs, be, dns, totals}.
   */
  function computeRates(live) {
    const t = Number(live.generated_unix_ms) || Date.now();
    const seen = new Set();
    const obs = (key, v, keep) => {
      seen.add(key);
      return rates.observe(t, key, v, keep);
    };
    const totals = { requests: 0, errors: 0, packets: 0, drops: 0, flows: 0, bytesIn: 0, bytesOut: 0, current: 0, any: false };
    const add = (k, v) => {
      if (v !== null && v !== undefined) {
        totals[k] += v;
        totals.any = true;
      }
    };
    const vs = new Map();
    for (const v of live.vservices || []) {
      const c = v.counters || {};
      const k = `vs:${v.name}:`;
      let r;
      if (isNetwork(v)) {
        r = {
          main: obs(`${k}packets`, c.packets, true),
          flows: obs(`${k}flows`, c.new_flows),
          bytes: obs(`${k}bytes`, c.bytes),
          errors: obs(`${k}drops`, c.drops, true),
          replyPackets: obs(`${k}rpk`, c.reply_packets),
          replyBytes: obs(`${k}rby`, c.reply_bytes),
        };
        add("packets", r.main);
        add("drops", r.errors);
        add("flows", r.flows);
        add("bytesIn", r.bytes);
        add("bytesOut", r.replyBytes);
      } else {
        r = {
          main: obs(`${k}requests`, c.requests, true),
          errors: obs(`${k}errors`, v.counters ? l7Errors(c) : null, true),
          bytesIn: obs(`${k}bin`, c.bytes_in),
          bytesOut: obs(`${k}bout`, c.bytes_out),
        };
        add("requests", r.main);
        add("errors", r.errors);
        add("bytesIn", r.bytesIn);
        add("bytesOut", r.bytesOut);
        totals.current += Number(c.current || 0);
      }
      r.history = rates.series(`${k}${isNetwork(v) ? "packets" : "requests"}`);
      r.errorHistory = rates.series(`${k}${isNetwork(v) ? "drops" : "errors"}`);
      vs.set(v.name, r);
    }
    const be = new Map();
    for (const b of live.backends || []) {
      const k = `be:${b.name}:`;
      be.set(b.name, {
        main: obs(`${k}total`, b.total ?? b.packets),
        bytesIn: obs(`${k}bin`, b.bytes_in ?? b.bytes),
        bytesOut: obs(`${k}bout`, b.bytes_out ?? b.reply_bytes),
        errors: obs(`${k}fail`, b.failures),
      });
    }
    const dns = new Map();
    for (const d of live.dns_vservices || []) {
      const c = d.counters || {};
      const k = `dns:${d.name}:`;
      dns.set(d.name, {
        queries: obs(`${k}queries`, c.queries, true),
        history: rates.series(`${k}queries`),
      });
    }
    if (totals.any) {
      for (const key of ["requests", "errors", "packets", "drops"]) {
        // On the first poll the totals are the daemon's newest sample, already in the rings.
        if (state.polls > 0) rates.push(`total:${key}`, t, totals[key]);
        seen.add(`total:${key}`);
      }
    } else {
      for (const key of ["requests", "errors", "packets", "drops"]) seen.add(`total:${key}`);
    }
    rates.retain(seen);
    return { t, vs, be, dns, totals: totals.any ? totals : null };
  }

  const isNetwork = (v) => ["tcp-l4", "udp-l4", "any-l3"].includes(v.kind);

  // ----- summary and overview ---------------------------------------------------------------

  function tile(label, value, testid, extra) {
    return el(
      "div",
      { class: `tile ${extra?.cls || ""}`, "data-testid": testid },
      el("div", { class: "tile-label", text: label }),
      el("div", { class: "tile-value", text: value, "data-value": extra?.raw }),
      extra?.sub ? el("div", { class: "tile-sub", text: extra.sub }) : null,
    );
  }

  function renderSummary(live, r) {
    const vss = live.vservices || [];
    const bes = live.backends || [];
    const hasL7 = vss.some((v) => !isNetwork(v));
    const hasNet = vss.some(isNetwork);
    const tot = r.totals || {};
    const rt = (x) => (r.totals ? fmtRate(x) : "…");
    const states = vss.map((v) => vsState(v, state.backendsByName).label);
    const count = (arr, x) => arr.filter((s) => s === x).length;
    const beHealth = bes.map((b) => b.health);
    const maint = bes.filter((b) => b.maintenance).length;
    const tiles = [];
    if (hasL7) {
      tiles.push(tile("Requests/s", rt(tot.requests), "sum-requests", { raw: tot.requests, sub: `${fmtNum(tot.current)} open session${tot.current === 1 ? "" : "s"}` }));
    }
    if (hasNet) {
      tiles.push(tile("Packets/s", rt(tot.packets), "sum-packets", { raw: tot.packets, sub: `${rt(tot.flows)} new flows/s` }));
    }
    tiles.push(
      tile("Errors/s", rt(tot.errors + tot.drops), "sum-errors", {
        raw: (tot.errors || 0) + (tot.drops || 0),
        cls: (tot.errors || 0) + (tot.drops || 0) > 0 ? "bad" : "",
        sub: hasNet ? "5xx, 503, timeouts, aborts, drops" : "5xx, 503, timeouts, aborts",
      }),
      tile("Traffic in / out", r.totals ? `${fmtBytesRate(tot.bytesIn)}` : "…", "sum-traffic", {
        sub: r.totals ? `out ${fmtBytesRate(tot.bytesOut)}` : "",
      }),
      tile("vServices", `${count(states, "OK")} / ${vss.length} OK`, "sum-vservices", {
        cls: count(states, "Error") > 0 ? "bad" : "",
        sub: [
          count(states, "Error") && `${count(states, "Error")} down`,
          states.filter((s) => s.startsWith("Backup")).length && `${states.filter((s) => s.startsWith("Backup")).length} on backup`,
          count(states, "Preparing") && `${count(states, "Preparing")} preparing`,
        ].filter(Boolean).join(" · ") || "all on their mains",
      }),
      tile("Backend Services", `${count(beHealth, "OK")} / ${bes.length} OK`, "sum-backends", {
        cls: count(beHealth, "Error") > 0 ? "warn" : "",
        sub: [
          count(beHealth, "Error") && `${count(beHealth, "Error")} Error`,
          count(beHealth, "Preparing") && `${count(beHealth, "Preparing")} Preparing`,
          maint && `${maint} in Maintenance`,
        ].filter(Boolean).join(" · ") || "all healthy",
      }),
    );
    if ((live.dns_vservices || []).length) {
      const q = [...r.dns.values()].reduce((a, d) => a + (d.queries || 0), 0);
      tiles.push(tile("DNS queries/s", rt(q), "sum-dns", { raw: q }));
    }
    setChildren($("summary"), tiles);

    const charts = [];
    const n = (hasL7 || !hasNet ? 1 : 0) + (hasNet ? 1 : 0);
    const box = $("overview");
    state.chartWidth = Math.max(320, Math.floor((box.clientWidth - 10 * (n - 1)) / n) - 22);
    if (hasL7 || !hasNet) {
      charts.push(chartBox("Requests/s and errors/s, all HTTP and L7 TCP vServices", "overview-l7", [
        { key: "requests", label: "requests/s", cls: "series-a", points: rates.series("total:requests") },
        { key: "errors", label: "errors/s", cls: "series-err", points: rates.series("total:errors") },
      ], r.t));
    }
    if (hasNet) {
      charts.push(chartBox("Packets/s and drops/s, all Network vServices", "overview-net", [
        { key: "packets", label: "packets/s", cls: "series-b", points: rates.series("total:packets") },
        { key: "drops", label: "drops/s", cls: "series-err", points: rates.series("total:drops") },
      ], r.t));
    }
    $("overview").replaceChildren(...charts);
  }

  function chartBox(title, testid, series, now) {
    return el(
      "div",
      { class: "chart-card" },
      el("div", { class: "chart-title" }, title,
        ...series.map((s) => el("span", { class: `key ${s.cls}` }, el("i"), s.label))),
      overview(series, now, { testid, label: title, fmt: fmtRate, width: state.chartWidth, height: 170, window: state.window }),
    );
  }

  // ----- vServices ------------------------------------------------------------------------

  /** The state an operator reads off a vService: where its default list sends traffic. */
  function vsState(vs, byName) {
    const list = (vs.lists || [])[0];
    const tier = String(list?.tier || "none");
    if (tier === "mains") return { label: "OK", cls: "ok" };
    if (tier.startsWith("backup")) return { label: `Backup`, cls: "backup", title: `serving from ${tier}` };
    const members = (list?.members || []).map((m) => byName.get(m.name)).filter(Boolean);
    if (members.length === 0) return { label: "Error", cls: "error", title: "no Backend Service listed" };
    if (members.every((b) => b.maintenance)) return { label: "Maintenance", cls: "maint", title: "every Backend Service is in Maintenance" };
    if (members.some((b) => b.health === "Preparing") && !members.some((b) => b.health === "OK")) {
      return { label: "Preparing", cls: "preparing", title: "waiting for the first health checks" };
    }
    return { label: "Error", cls: "error", title: "no Backend Service can take traffic" };
  }

  const COUNTER_LABELS = {
    requests: ["requests", fmtCount],
    current: ["current", fmtNum],
    bytes_in: ["bytes in", fmtBytes],
    bytes_out: ["bytes out", fmtBytes],
    packets: ["packets in", fmtCount],
    bytes: ["bytes in", fmtBytes],
    reply_packets: ["packets out", fmtCount],
    reply_bytes: ["bytes out", fmtBytes],
    new_flows: ["new flows", fmtCount],
    drops: ["drops", fmtCount],
    unavailable: ["503 unavailable", fmtCount],
    retries: ["retries", fmtCount],
    retries_refused: ["retries refused", fmtCount],
    server_timeouts: ["504 timeouts", fmtCount],
    upstream_aborts: ["server aborts", fmtCount],
    client_aborts: ["client aborts", fmtCount],
    bad_requests: ["bad requests", fmtCount],
    failures: ["failed tries", fmtCount],
  };
  const ERROR_KEYS = ["unavailable", "server_timeouts", "upstream_aborts", "drops", "bad_requests", "failures"];

  function counterItems(vs) {
    const c = vs.counters;
    if (!c || typeof c !== "object") return [el("span", { class: "empty", text: "no counters yet" })];
    const order = Object.keys(COUNTER_LABELS);
    const items = order
      .filter((k) => k in c)
      .map((k) => {
        const [label, f] = COUNTER_LABELS[k];
        const bad = ERROR_KEYS.includes(k) && Number(c[k]) > 0;
        return el("span", { class: bad ? "bad" : null, "data-testid": `counter-${k}` }, el("span", { class: "k", text: label }), el("b", { text: f(c[k]) }));
      });
    if (isNetwork(vs) && !("reply_packets" in c)) {
      items.splice(2, 0, el("span", { class: "note", "data-testid": "counter-out" },
        el("span", { class: "k", text: "out" }),
        el("b", { text: vs.mode === "dsr" ? "DSR: replies bypass" : "not counted" })));
    }
    return items;
  }

  function classItems(vs) {
    const cls = vs.counters?.responses;
    if (!cls || vs.kind !== "http") return null;
    return el(
      "div",
      { class: "classes", "data-testid": `classes-${vs.name}` },
      ...["2xx", "3xx", "4xx", "5xx", "1xx"].map((k) =>
        el("span", { class: `cls c${k[0]}`, "data-testid": `class-${vs.name}-${k}` }, el("i", { text: k }), fmtCount(cls[k] ?? 0)),
      ),
    );
  }

  function rateBlock(vs, r) {
    const net = isNetwork(vs);
    const main = r?.main;
    const unit = net ? "packets/s" : vs.kind === "http" ? "requests/s" : "connections/s";
    const side = net
      ? [
          ["new flows/s", fmtRate(r?.flows)],
          ["in", fmtBytesRate(r?.bytes)],
          ["out", vs.counters && "reply_bytes" in vs.counters ? fmtBytesRate(r?.replyBytes) : vs.mode === "dsr" ? "DSR: bypass" : "–"],
          ["drops/s", fmtRate(r?.errors), (r?.errors || 0) > 0],
        ]
      : [
          ["errors/s", fmtRate(r?.errors), (r?.errors || 0) > 0],
          ["in", fmtBytesRate(r?.bytesIn)],
          ["out", fmtBytesRate(r?.bytesOut)],
          ["current", fmtNum(vs.counters?.current)],
        ];
    return el(
      "div",
      { class: "vs-rates" },
      el(
        "div",
        { class: "rate-main" },
        el("div", { class: "big", "data-testid": `rate-${vs.name}`, "data-rate": main ?? "", text: main === null || main === undefined ? "…" : fmtRate(main) }),
        el("div", { class: "unit", text: unit }),
      ),
      sparkline(r?.history || [], state.now, {
        testid: `spark-${vs.name}`,
        label: `${unit} over the last minutes`,
        cls: net ? "series-b" : "series-a",
        width: 240,
        height: 44,
        window: state.window,
      }),
      el("div", { class: "rate-side" }, ...side.map(([k, v, bad]) =>
        el("div", { class: bad ? "bad" : null }, el("span", { class: "k", text: k }), el("b", { text: v })))),
    );
  }

  /** What each member state of a list means, for its tooltip (S-BK, S-MT). */
  const MEMBER_STATES = {
    eligible: "takes new traffic",
    standby: "healthy and not in use: stands by while a main (or an earlier backup) serves",
    drained: "weight 0: no new traffic, its open connections carry on",
    maintenance: "in Maintenance: no new traffic, its open connections carry on",
    down: "health Preparing or Error: no new traffic",
  };

  function listsTable(vs) {
    const name = vs.name;
    const rows = (vs.lists || []).map((list) => {
      const members = (list.members || []).map((m) =>
        el(
          "span",
          {
            class: `member ${m.state || ""}`,
            "data-testid": `member-${name}-${list.name}-${m.name}`,
            "data-state": m.state || "",
            title: `${m.name}: ${m.role || "main"}, ${m.state || "?"}${MEMBER_STATES[m.state] ? ` (${MEMBER_STATES[m.state]})` : ""}`,
          },
          m.name,
          m.role === "backup" ? el("span", { class: "role", text: " (backup)" }) : null,
          el("span", { class: "role", text: ` ${m.state || ""}` }),
        ),
      );
      return el(
        "tr",
        { "data-testid": `list-${name}-${list.name}` },
        el("td", { text: list.name }),
        el(
          "td",
          {},
          el("span", {
            class: `tier ${tierClass(list.tier)}`,
            "data-testid": `tier-${name}-${list.name}`,
            text: list.tier || "none",
          }),
        ),
        el("td", {}, ...(members.length ? members : [el("span", { class: "empty", text: "no members" })])),
      );
    });
    return el(
      "table",
      { class: "grid lists" },
      el("thead", {}, el("tr", {}, el("th", { text: "List" }), el("th", { text: "Active tier" }), el("th", { text: "Members" }))),
      el("tbody", {}, ...rows),
    );
  }

  function vsHead(vs, st) {
    return el(
      "div",
      { class: "vs-head" },
      el("span", { class: `badge ${st.cls}`, "data-testid": `vs-state-${vs.name}`, title: st.title || null, text: st.label }),
      el("span", { class: "name", text: vs.name }),
      el("span", { class: "kind", text: vs.kind || "?" }),
      vs.mode ? el("span", { class: "kind", text: vs.mode }) : null,
      el("span", { class: "addr", text: hostPort(vs.address, fmtPorts(vs.ports)) }),
      vs.address6 ? el("span", { class: "addr", text: hostPort(vs.address6, fmtPorts(vs.ports)) }) : null,
    );
  }

  /** Cards by vService name; each part is rebuilt only when what it shows changed. */
  const vsCards = new Map();

  /** Rebuilds `slot` of `card` unless `key` is the one it was built from (undefined: always). */
  function slotUpdate(card, slot, key, build) {
    if (key !== undefined && card.keys[slot] === key) return;
    card.keys[slot] = key;
    const node = build();
    card.slots[slot].replaceChildren(...(node ? [node] : []));
  }

  function renderVService(vs, r) {
    let card = vsCards.get(vs.name);
    if (!card) {
      const slots = {};
      for (const k of ["head", "rates", "classes", "counters", "lists"]) slots[k] = el("div", { class: "slot" });
      const root = el("div", { "data-testid": `vservice-${vs.name}` }, ...Object.values(slots));
      card = { root, slots, keys: {} };
      vsCards.set(vs.name, card);
    }
    const st = vsState(vs, state.backendsByName);
    const cls = `vs st-${st.cls}`;
    if (card.root.className !== cls) card.root.className = cls;
    const head = [st, vs.kind, vs.mode, vs.address, vs.address6, vs.ports];
    slotUpdate(card, "head", JSON.stringify(head), () => vsHead(vs, st));
    slotUpdate(card, "rates", undefined, () => rateBlock(vs, r));
    slotUpdate(card, "classes", JSON.stringify([vs.kind, vs.counters?.responses]), () => classItems(vs));
    slotUpdate(card, "counters", JSON.stringify([vs.counters, vs.mode]), () =>
      el("div", { class: "counters cgrid" }, ...counterItems(vs)));
    slotUpdate(card, "lists", JSON.stringify(vs.lists), () => listsTable(vs));
    return card.root;
  }

  function renderVServices(list, r) {
    const box = $("vservices");
    if (!list || list.length === 0) {
      vsCards.clear();
      setChildren(box, [el("p", { class: "empty", text: "No vServices configured." })]);
      return;
    }
    let grid = box.querySelector(":scope > .vservices");
    if (!grid) {
      grid = el("div", { class: "vservices" });
      box.replaceChildren(grid);
    }
    const names = new Set(list.map((v) => v.name));
    for (const [n, card] of vsCards) {
      if (!names.has(n)) {
        card.root.remove();
        vsCards.delete(n);
      }
    }
    list.forEach((v, i) => {
      const node = renderVService(v, r.vs.get(v.name));
      if (grid.children[i] !== node) grid.insertBefore(node, grid.children[i] || null);
    });
  }

  // ----- Backend Services -----------------------------------------------------------------

  const BACKEND_COLUMNS = 16;
  const CLASSES = ["2xx", "3xx", "4xx", "5xx"];

  function buildBackendRow(name) {
    const cells = {};
    // Counter cells get test ids ("total-b1", "bytes-in-b1", "used-in-b1", "check-b1",
    // "since-b1", "rate-b-b1", "c2xx-b1"); the health cell holds badges with their own.
    const ids = {
      current: `current-${name}`,
      total: `total-${name}`,
      bytes_in: `bytes-in-${name}`,
      bytes_out: `bytes-out-${name}`,
      used_in: `used-in-${name}`,
      check: `check-${name}`,
      rate: `rate-b-${name}`,
      c2xx: `c2xx-${name}`,
      c3xx: `c3xx-${name}`,
      c4xx: `c4xx-${name}`,
      c5xx: `c5xx-${name}`,
      errors: `errors-b-${name}`,
    };
    const td = (key, cls) => (cells[key] = el("td", { class: cls, "data-testid": ids[key] || null }));
    const link = el("a", {
      class: "backend-link",
      href: `#transitions/${encodeURIComponent(name)}`,
      "data-testid": `backend-link-${name}`,
      text: name,
    });
    link.addEventListener("click", (ev) => {
      ev.preventDefault();
      openTransitions(name);
    });
    const toggle = el("button", { type: "button", class: "toggle", "data-testid": `maint-toggle-${name}` });
    toggle.addEventListener("click", () => toggleMaintenance(name, toggle));
    cells.address = el("div", { class: "baddr mono" });
    cells.since = el("span", { class: "since", "data-testid": `since-${name}` });
    const row = el(
      "tr",
      { "data-testid": `backend-row-${name}`, "data-name": name },
      el("td", { class: "bname" }, link, cells.address),
      td("weight", "num"),
      td("health", "health"),
      td("check", "check"),
      td("current", "num"),
      td("rate", "num"),
      td("total", "num"),
      td("bytes_in", "num"),
      td("bytes_out", "num"),
      td("c2xx", "num cls2"),
      td("c3xx", "num cls3"),
      td("c4xx", "num cls4"),
      td("c5xx", "num cls5"),
      td("errors", "num"),
      td("used_in", "used"),
      el("td", {}, toggle),
    );
    row._cells = cells;
    row._toggle = toggle;
    return row;
  }

  /** Whether every Network vService using `b` is DSR (no reply path to count). */
  function onlyDsr(b) {
    const modes = (b.used_in || []).map((u) => state.vsByName.get(u.vservice)).filter((v) => v && isNetwork(v)).map((v) => v.mode);
    return modes.length > 0 && modes.every((m) => m === "dsr");
  }

  /** A cell saying a value does not apply here (greyed, with why in its title). */
  function naCell(node, text, why) {
    if (node.dataset.na === text && node.firstElementChild) return;
    node.dataset.na = text;
    node.replaceChildren(el("span", { class: "na", title: why, text }));
  }

  /** A cell with a plain value (clears a previous "does not apply"). */
  function valueCell(node, text) {
    if (node.dataset.na) {
      delete node.dataset.na;
      node.replaceChildren();
    }
    setText(node, text);
  }

  function updateBackendRow(row, b, r) {
    const c = row._cells;
    const name = b.name;
    const l7 = b.total !== undefined && b.total !== null;
    const xdp = b.packets !== undefined && b.packets !== null;
    setText(
      c.address,
      b.address6 ? `${hostPort(b.address, b.port)} ${hostPort(b.address6, b.port)}` : hostPort(b.address, b.port),
    );
    setText(c.weight, fmtNum(b.weight));
    const since = b.state_since_unix_ms ? state.now - Number(b.state_since_unix_ms) : null;
    // The badges are rebuilt only when they change; the time in state moves every second.
    const healthKey = JSON.stringify([b.health, b.checked, b.health6, b.maintenance, b.backup, b.server]);
    if (row._healthKey !== healthKey) {
      row._healthKey = healthKey;
      c.health.replaceChildren(...[
        el("span", {
          class: `badge ${healthClass(b.health)}`,
          "data-testid": `health-${name}`,
          "data-health": b.health,
          text: b.health || "?",
        }),
        c.since,
        b.checked === false ? el("span", { class: "role", text: " not checked" }) : null,
        // A dual-stack service's IPv6 address is checked on its own.
        b.health6
          ? el("span", {
              class: `badge ${healthClass(b.health6)}`,
              "data-testid": `health6-${name}`,
              title: "IPv6 address",
              text: `IPv6 ${b.health6}`,
            })
          : null,
        b.maintenance ? el("span", { class: "maint", "data-testid": `maint-${name}`, text: "Maintenance" }) : null,
        b.backup ? el("span", { class: "backup-marker", "data-testid": `backup-${name}`, text: "Backup" }) : null,
        // The server's own state (S-SF) only when it says more than the service's health.
        b.server && b.server !== "OK"
          ? el("span", { class: "server-note", "data-testid": `server-${name}`, title: "state of the server (all its services)", text: `server ${b.server}` })
          : null,
      ].filter(Boolean));
    }
    setText(c.since, since === null ? "" : `for ${fmtDur(since)}`);
    const sinceTitle = b.state_since_unix_ms ? `${b.health} since ${fmtDateTime(b.state_since_unix_ms)}` : "no transition recorded since the daemon started";
    setTitle(c.since, sinceTitle);
    const lc = b.last_check;
    const checkKey = lc ? JSON.stringify([lc.ok, fmtCheckDur(Number(lc.duration_ms)), lc.reason]) : `none:${b.health_check}`;
    if (row._checkKey !== checkKey) {
      row._checkKey = checkKey;
      if (lc) {
        c.check.replaceChildren(...[
          el("span", { class: `chk ${lc.ok ? "pass" : "fail"}`, text: lc.ok ? "passed" : "failed" }),
          el("b", { class: "dur", text: fmtCheckDur(Number(lc.duration_ms)) }),
          // The reason says what failed; a passed check's reason repeats its duration.
          lc.ok ? null : el("span", { class: "why", text: lc.reason || "" }),
        ].filter(Boolean));
        c.check.dataset.ok = lc.ok ? "true" : "false";
      } else {
        c.check.replaceChildren(el("span", { class: "na", text: b.health_check ? "no check yet" : "no health check" }));
      }
    }
    const checkTitle = lc
      ? `profile ${b.health_check || "?"}, at ${fmtDateTime(lc.at_unix_ms)}: ${lc.reason || ""}`
      : b.health_check ? `profile ${b.health_check}` : "no health check profile: always OK";
    setTitle(c.check, checkTitle);
    // L7 backends report sessions and requests; Network backends what XDP counts.
    if (l7) valueCell(c.current, fmtNum(b.current_sessions));
    else if (xdp) naCell(c.current, "n/a", "XDP forwards packets without tracking open connections per backend");
    else valueCell(c.current, "–");
    const unit = l7 ? "/s" : xdp ? " pkt/s" : "";
    setText(c.rate, r && r.main !== null && r.main !== undefined ? `${fmtRate(r.main)}${unit}` : l7 || xdp ? "…" : "–");
    const rateData = String(r?.main ?? "");
    if (c.rate.dataset.rate !== rateData) c.rate.dataset.rate = rateData;
    setTitle(c.rate, r
      ? `in ${fmtBytesRate(r.bytesIn)}, out ${fmtBytesRate(r.bytesOut)}${r.errors ? `, ${fmtRate(r.errors)} failed tries/s` : ""}`
      : "");
    setText(c.total, fmtNum(b.total ?? b.new_flows));
    setTitle(c.total, l7 ? "requests (HTTP) or connections (L7 TCP) served" : xdp ? `new flows; ${fmtNum(b.packets)} packets in` : "");
    setText(c.bytes_in, fmtBytes(b.bytes_in ?? b.bytes));
    if (l7 || b.reply_bytes !== undefined) valueCell(c.bytes_out, fmtBytes(b.bytes_out ?? b.reply_bytes));
    else if (xdp && onlyDsr(b)) naCell(c.bytes_out, "DSR: bypass", "Direct server return: replies go from the server to the client, not through the balancer");
    else if (xdp) naCell(c.bytes_out, "n/a", "this data path does not count replies");
    else valueCell(c.bytes_out, "–");
    const cls = b.responses;
    const http = (b.used_in || []).some((u) => state.vsByName.get(u.vservice)?.kind === "http");
    for (const k of CLASSES) {
      const cell = c[`c${k}`];
      if (cls && http) valueCell(cell, fmtCount(cls[k] ?? 0));
      else naCell(cell, "–", "answers by status class exist for HTTP vServices only");
      cell.classList.toggle("hot", k === "5xx" && cls && http && Number(cls[k]) > 0);
    }
    const errs = b.failures;
    const errRate = r?.errors ? ` · ${fmtRate(r.errors)}/s` : "";
    setText(c.errors, errs === undefined || errs === null ? "–" : `${fmtCount(errs)}${errRate}`);
    c.errors.classList.toggle("bad", Number(errs) > 0);
    setTitle(c.errors, errs === undefined || errs === null ? "" : `${fmtNum(errs)} failed tries, ${fmtNum(b.retries)} retries, ${fmtNum(b.redispatches)} redispatched`);
    const used = (b.used_in || []).map(fmtUsedIn);
    setText(c.used_in, used.length ? used.join(", ") : "–");
    row.classList.toggle("in-maint", !!b.maintenance);
    row.classList.toggle("is-error", b.health === "Error");
    row.classList.toggle("selected", state.selected === name);

    const pending = state.pending.get(name);
    if (pending && (pending.want === !!b.maintenance || Date.now() > pending.until)) {
      state.pending.delete(name);
    }
    const t = row._toggle;
    t.disabled = state.pending.has(name);
    t.classList.toggle("on", !!b.maintenance);
    t.setAttribute("aria-pressed", b.maintenance ? "true" : "false");
    t.dataset.maintenance = b.maintenance ? "on" : "off";
    t.title = b.maintenance ? "Return this Backend Service to distribution" : "Stop new traffic to this Backend Service";
    setText(t, b.maintenance ? "Maintenance off" : "Maintenance on");
  }

  function renderBackends(list, r) {
    const tbody = $("backends").tBodies[0];
    const existing = new Map([...tbody.rows].map((row) => [row.dataset.name, row]));
    const wanted = (list || []).map((b) => {
      const row = existing.get(b.name) || buildBackendRow(b.name);
      existing.delete(b.name);
      updateBackendRow(row, b, r.be.get(b.name));
      return row;
    });
    for (const stale of existing.values()) stale.remove();
    wanted.forEach((row, i) => {
      if (tbody.rows[i] !== row) tbody.insertBefore(row, tbody.rows[i] || null);
    });
    if (wanted.length === 0 && !tbody.querySelector(".empty")) {
      tbody.append(el("tr", { class: "empty" }, el("td", { colspan: BACKEND_COLUMNS, text: "No Backend Services." })));
    } else if (wanted.length > 0) {
      tbody.querySelectorAll("tr.empty").forEach((row) => row.remove());
    }
  }

  async function toggleMaintenance(name, button) {
    const on = button.dataset.maintenance !== "on";
    state.pending.set(name, { want: on, until: Date.now() + TOGGLE_SETTLE_MS });
    button.disabled = true;
    try {
      await api(`/api/v1/backends/${encodeURIComponent(name)}/maintenance`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ on }),
      });
      setActionError(null);
    } catch (e) {
      state.pending.delete(name);
      setActionError(`maintenance ${on ? "on" : "off"} for ${name} failed: ${e.message}`);
    }
    await refresh();
  }

  // ----- transitions view -----------------------------------------------------------------

  function openTransitions(name) {
    state.selected = name;
    $("transitions").hidden = false;
    setText($("transitions-name"), name);
    history.replaceState(null, "", `#transitions/${encodeURIComponent(name)}`);
    for (const r of $("backends").tBodies[0].rows) r.classList.toggle("selected", r.dataset.name === name);
    loadTransitions();
    $("transitions").scrollIntoView({ behavior: "smooth", block: "start" });
  }

  function closeTransitions() {
    state.selected = null;
    state.errors.transitions = null;
    $("transitions").hidden = true;
    history.replaceState(null, "", location.pathname);
    renderBanner();
  }

  async function loadTransitions() {
    const name = state.selected;
    if (!name) return;
    try {
      const data = await api(`/api/v1/backends/${encodeURIComponent(name)}/transitions`);
      if (state.selected !== name) return;
      state.errors.transitions = null;
      renderTransitions(data || {});
    } catch (e) {
      state.errors.transitions = e.message;
    }
    renderBanner();
  }

  function renderTransitions(data) {
    const transitions = data.transitions || [];
    const checks = data.checks || [];
    const tbody = $("transitions-table").tBodies[0];
    const rows = transitions
      .slice()
      .sort((a, b) => b.at_unix_ms - a.at_unix_ms)
      .map((t) =>
        el(
          "tr",
          { "data-testid": "transition-row" },
          el("td", { class: "mono", text: fmtDateTime(t.at_unix_ms) }),
          el("td", {}, el("span", { class: `badge ${healthClass(t.from)}`, text: t.from ?? "–" })),
          el("td", {}, el("span", { class: `badge ${healthClass(t.to)}`, text: t.to ?? "–" })),
          el("td", { text: t.reason ?? "" }),
          el("td", { class: "num", text: fmtCheckMs(t.check_ms) }),
        ),
      );
    if (rows.length === 0) {
      rows.push(el("tr", {}, el("td", { colspan: 5, class: "empty", text: "No transitions recorded." })));
    }
    setChildren(tbody, rows);
    drawChart($("checks-chart"), checks, transitions);
  }

  /** A "nice" step (1, 2 or 5 times a power of ten) giving about `count` ticks over `span`. */
  function niceStep(span, count) {
    const raw = span / Math.max(1, count);
    const pow = 10 ** Math.floor(Math.log10(raw));
    const f = raw / pow;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * pow;
  }

  /** Plots check durations over time: axes, a ms scale, passed checks green, failed red. */
  function drawChart(canvas, checks, transitions) {
    const dpr = window.devicePixelRatio || 1;
    const cssW = canvas.clientWidth || 900;
    const cssH = canvas.clientHeight || 260;
    if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(cssH * dpr)) {
      canvas.width = Math.round(cssW * dpr);
      canvas.height = Math.round(cssH * dpr);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, cssW, cssH);
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, cssW, cssH);

    const m = { left: 76, right: 16, top: 14, bottom: 34 };
    const w = cssW - m.left - m.right;
    const h = cssH - m.top - m.bottom;
    const pts = checks
      .filter((c) => Number.isFinite(Number(c.at_unix_ms)))
      .map((c) => ({ t: Number(c.at_unix_ms), d: Math.max(0, Number(c.duration_ms) || 0), ok: !!c.ok }))
      .sort((a, b) => a.t - b.t);

    let t0 = pts.length ? pts[0].t : Date.now() - 60000;
    let t1 = pts.length ? pts[pts.length - 1].t : Date.now();
    if (t1 - t0 < 10000) {
      const mid = (t0 + t1) / 2;
      t0 = mid - 5000;
      t1 = mid + 5000;
    }
    const maxD = pts.reduce((acc, p) => Math.max(acc, p.d), 0);
    const yStep = niceStep(Math.max(maxD * 1.15, 1), 5);
    const yMax = Math.max(yStep, Math.ceil((Math.max(maxD * 1.15, 1)) / yStep) * yStep);
    const x = (t) => m.left + ((t - t0) / (t1 - t0)) * w;
    const y = (d) => m.top + h - (d / yMax) * h;

    ctx.font = "11px system-ui, sans-serif";
    ctx.lineWidth = 1;
    // Grid and the ms scale.
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let v = 0; v <= yMax + yStep / 2; v += yStep) {
      const yy = Math.round(y(v)) + 0.5;
      ctx.strokeStyle = v === 0 ? "#2b3a4f" : "#e3e7ec";
      ctx.beginPath();
      ctx.moveTo(m.left, yy);
      ctx.lineTo(m.left + w, yy);
      ctx.stroke();
      ctx.fillStyle = "#4b5563";
      const label = yStep < 1 ? v.toFixed(String(yStep).split(".")[1]?.length || 1) : String(Math.round(v));
      ctx.fillText(`${label} ms`, m.left - 6, yy);
    }
    // Time axis.
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const xStep = niceStep((t1 - t0) / 1000, 6) * 1000;
    for (let t = Math.ceil(t0 / xStep) * xStep; t <= t1; t += xStep) {
      const xx = Math.round(x(t)) + 0.5;
      ctx.strokeStyle = "#2b3a4f";
      ctx.beginPath();
      ctx.moveTo(xx, m.top + h);
      ctx.lineTo(xx, m.top + h + 4);
      ctx.stroke();
      ctx.fillStyle = "#4b5563";
      ctx.fillText(fmtTime(t).slice(0, 8), xx, m.top + h + 6);
    }
    ctx.strokeStyle = "#2b3a4f";
    ctx.beginPath();
    ctx.moveTo(m.left + 0.5, m.top);
    ctx.lineTo(m.left + 0.5, m.top + h);
    ctx.stroke();
    ctx.save();
    ctx.translate(11, m.top + h / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.fillText("check duration", 0, 0);
    ctx.restore();

    // State transitions as vertical markers.
    ctx.save();
    ctx.beginPath();
    ctx.rect(m.left, m.top, w, h);
    ctx.clip();
    for (const tr of transitions || []) {
      const t = Number(tr.at_unix_ms);
      if (!(t >= t0 && t <= t1)) continue;
      const xx = Math.round(x(t)) + 0.5;
      ctx.strokeStyle = "#7c3aed";
      ctx.setLineDash([4, 3]);
      ctx.beginPath();
      ctx.moveTo(xx, m.top);
      ctx.lineTo(xx, m.top + h);
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.fillStyle = "#7c3aed";
      ctx.textAlign = "left";
      ctx.textBaseline = "top";
      ctx.fillText(`→ ${tr.to}`, xx + 3, m.top + 2);
    }
    // Durations: a line through the checks, then one dot per check.
    if (pts.length > 1) {
      ctx.strokeStyle = "rgba(31, 95, 191, 0.55)";
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      pts.forEach((p, i) => (i === 0 ? ctx.moveTo(x(p.t), y(p.d)) : ctx.lineTo(x(p.t), y(p.d))));
      ctx.stroke();
    }
    for (const p of pts) {
      ctx.fillStyle = p.ok ? "#1f9d55" : "#d64545";
      ctx.beginPath();
      ctx.arc(x(p.t), y(p.d), p.ok ? 3 : 4.5, 0, Math.PI * 2);
      ctx.fill();
    }
    ctx.restore();
    if (pts.length === 0) {
      ctx.fillStyle = "#6b7280";
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText("No checks recorded yet", m.left + w / 2, m.top + h / 2);
    }
    canvas.dataset.points = String(pts.length);
    canvas.dataset.failed = String(pts.filter((p) => !p.ok).length);
  }

  // ----- global sites (S-GS4) -------------------------------------------------------------

  function siteClass(state) {
    if (state === "OK") return "badge ok";
    if (state === "No Services") return "badge error";
    return "badge preparing";
  }

  function renderGslb(data) {
    const sites = (data && data.sites) || [];
    $("gslb").hidden = sites.length === 0;
    if (sites.length === 0) return;
    const rows = sites.map((s) =>
      el("tr", { "data-testid": `gslb-site-${s.key.record}-${s.key.site}` },
        el("td", { text: s.key.dns_vservice }),
        el("td", { text: s.key.record }),
        el("td", { text: s.key.site }),
        el("td", { text: s.vservice }),
        el("td", { text: s.standby ? "standby" : "active" }),
        el("td", {}, el("span", { class: siteClass(s.state), text: s.state })),
        el("td", { text: s.reason || "" }),
        el("td", { class: "num", text: fmtNum(s.sessions) }),
        el("td", { text: s.since_unix_ms ? fmtDateTime(s.since_unix_ms) : "–" })));
    setChildren($("gslb-sites").tBodies[0], rows);
    const recent = ((data && data.transitions) || []).slice(-10).reverse();
    setChildren($("gslb-transitions").tBodies[0], recent.map((t) =>
      el("tr", {},
        el("td", { text: fmtDateTime(t.at_unix_ms) }),
        el("td", { text: `${t.key.record} @ ${t.key.site}` }),
        el("td", { text: t.from }),
        el("td", { text: t.to }),
        el("td", { text: t.reason || "" }))));
  }

  // ----- cluster (shared configuration in etcd) ----------------------------------------------

  function renderCluster(c) {
    $("cluster").hidden = !c;
    if (!c) return;
    const st = c.status || {};
    const store = st.store_reachable
      ? el("span", {}, el("span", { class: "badge ok", text: "etcd reachable" }),
        ` node ${c.node}: revision ${st.applied_revision} applied, etcd holds ${st.store_revision}`)
      : el("span", {}, el("span", { class: "badge error", text: "etcd UNREACHABLE" }),
        ` node ${c.node} runs on revision ${st.applied_revision}: ${st.store_error || ""}`);
    const extra = [];
    if (st.staged) extra.push(el("span", { class: "badge maint", text: "changes staged for Synchronize" }));
    if (st.refused) {
      extra.push(el("span", { class: "badge error", text: `revision ${st.refused.revision} refused` }),
        ` ${st.refused.error.split("\n").slice(0, 2).join(" ")}`);
    }
    setChildren($("cluster-store"), [store, " ", ...extra]);
    setChildren($("cluster-nodes").tBodies[0], (c.nodes || []).map((n) =>
      el("tr", { "data-testid": `cluster-node-${n.name}` },
        el("td", { text: n.name }),
        el("td", { text: n.api }),
        el("td", { class: "num", text: n.applied_revision }),
        el("td", {}, el("span", { class: n.agrees ? "badge ok" : "badge error", text: n.agrees ? "yes" : "no" })),
        el("td", { text: n.applied_at_unix_ms ? fmtDateTime(n.applied_at_unix_ms) : "–" }),
        el("td", { text: n.refused ? `revision ${n.refused.revision}` : "" }))));
  }

  // ----- DNS vServices --------------------------------------------------------------------

  const DNS_COUNTERS = [
    ["queries", "queries"],
    ["answered", "answered"],
    ["standby_answers", "standby answers"],
    ["no_data", "no data"],
    ["nxdomain", "NXDOMAIN"],
    ["refused", "REFUSED"],
    ["formerr", "FORMERR"],
    ["notimp", "NOTIMP"],
    ["rate_limited", "rate-limited"],
  ];

  function renderDnsVService(d, r) {
    const c = d.counters || {};
    const names = (d.names || []).map((n) => {
      const answer = [...(n.a || []), ...(n.aaaa || [])];
      const id = `${d.name}-${n.name}`;
      return el(
        "tr",
        { "data-testid": `dns-name-${id}` },
        el("td", { class: "mono", text: n.name }),
        el("td", { "data-testid": `dns-policy-${id}` }, n.policy,
          el("span", { class: "role", text: ` · ${n.answers} per answer · unreachable: ${n.unreachable}` })),
        el(
          "td",
          { "data-testid": `dns-answer-${id}`, class: "mono" },
          ...(answer.length
            ? answer.map((a) => el("span", { class: "addr-chip", text: a }))
            : [el("span", { class: "bad", text: "no address (NOERROR, empty)" })]),
        ),
        el("td", {}, ...(n.sites || []).map((s) =>
          el("span", { class: `site ${siteClass(s.state).replace("badge ", "")}`, title: `${s.vservice} at ${s.site}: ${s.state}${s.reason ? ` (${s.reason})` : ""}` },
            `${s.site}${s.standby ? " (standby)" : ""} `, el("b", { text: s.state })))),
      );
    });
    return el(
      "div",
      { class: "vs dns", "data-testid": `dns-${d.name}` },
      el("div", { class: "vs-head" },
        el("span", { class: "name", text: d.name }),
        el("span", { class: "kind", text: "dns" }),
        el("span", { class: "addr", text: `${hostPort(d.address, d.port)} · zone ${d.zone}` })),
      el("div", { class: "vs-rates" },
        el("div", { class: "rate-main" },
          el("div", { class: "big", "data-testid": `rate-dns-${d.name}`, text: r?.queries === null || r?.queries === undefined ? "…" : fmtRate(r.queries) }),
          el("div", { class: "unit", text: "queries/s" })),
        sparkline(r?.history || [], state.now, { testid: `spark-dns-${d.name}`, label: "queries/s over the last minutes", cls: "series-c", width: 240, height: 44, window: state.window }),
        el("div", { class: "counters cgrid" }, ...DNS_COUNTERS.filter(([k]) => k in c).map(([k, label]) =>
          el("span", { class: ["formerr", "refused", "rate_limited"].includes(k) && c[k] > 0 ? "bad" : null, "data-testid": `dns-counter-${d.name}-${k}` },
            el("span", { class: "k", text: label }), el("b", { text: fmtCount(c[k]) }))))),
      el("table", { class: "grid lists" },
        el("thead", {}, el("tr", {}, el("th", { text: "Name" }), el("th", { text: "Policy" }), el("th", { text: "Answers now" }), el("th", { text: "Sites" }))),
        el("tbody", {}, ...names)),
    );
  }

  function renderDns(list, r) {
    const box = $("dns");
    box.hidden = !list || list.length === 0;
    if (box.hidden) return;
    setChildren($("dns-vservices"), [el("div", { class: "vservices" }, ...list.map((d) => renderDnsVService(d, r.dns.get(d.name))))]);
  }

  // Route announcement (S-AN): which VIPs this balancer announces to the routers, and why.
  function renderBgp(bgp) {
    const box = $("bgp");
    box.hidden = !bgp;
    if (!bgp) return;
    const node = bgp.drained ? "drained" : bgp.waiting ? "waiting to announce" : "announcing";
    setText($("bgp-node"), `— ${node}, table ${bgp.table}${bgp.device ? ` on ${bgp.device}` : ""}${bgp.error ? ` — ${bgp.error}` : ""}`);
    const rows = (bgp.vips || []).map((v) => el(
      "tr",
      { "data-testid": `bgp-vip-${v.address}` },
      el("td", { class: "mono", text: v.address }),
      el("td", { text: (v.vservices || []).join(", ") }),
      el("td", {}, el("span", { class: v.announced ? "badge ok" : "badge error", "data-testid": `bgp-state-${v.address}`, text: v.announced ? "announced" : "withdrawn" })),
      el("td", { text: v.reason || "" }),
    ));
    setChildren($("bgp-vips").querySelector("tbody"), rows);
  }

  // ----- refresh loop ---------------------------------------------------------------------

  async function refresh() {
    try {
      const live = await api(state.seeded ? "/api/v1/stats/live" : "/api/v1/stats/live?history=1");
      state.errors.refresh = null;
      state.now = Number(live.generated_unix_ms) || Date.now();
      if (!state.seeded) {
        state.seeded = true;
        seedHistory(live);
      }
      state.firstPoll ??= state.now;
      state.window = windowFor(state.firstPoll, state.now);
      state.backendsByName = new Map((live.backends || []).map((b) => [b.name, b]));
      state.vsByName = new Map((live.vservices || []).map((v) => [v.name, v]));
      const r = computeRates(live);
      renderSummary(live, r);
      renderVServices(live.vservices, r);
      renderBackends(live.backends, r);
      renderBgp(live.bgp);
      renderDns(live.dns_vservices, r);
      renderCluster(live.cluster);
      if ((live.dns_vservices || []).length) renderGslb(await api("/api/v1/gslb"));
      else $("gslb").hidden = true;
      const stamp = $("last-refresh");
      setText(stamp, fmtTime(state.now).slice(0, 8));
      stamp.setAttribute("datetime", new Date(state.now).toISOString());
      stamp.dataset.unixMs = String(state.now);
      state.polls += 1;
      stamp.dataset.polls = String(state.polls);
    } catch (e) {
      state.errors.refresh = e.message;
    }
    renderBanner();
    if (state.selected) await loadTransitions();
  }

  async function loop() {
    try {
      await refresh();
    } finally {
      setTimeout(loop, REFRESH_MS);
    }
  }

  function init() {
    const token = $("token");
    token.value = localStorage.getItem(TOKEN_KEY) || "";
    token.addEventListener("change", () => {
      const v = token.value.trim();
      if (v) localStorage.setItem(TOKEN_KEY, v);
      else localStorage.removeItem(TOKEN_KEY);
      refresh();
    });
    $("transitions-close").addEventListener("click", closeTransitions);
    const m = /^#transitions\/(.+)$/.exec(location.hash);
    if (m) openTransitions(decodeURIComponent(m[1]));
    window.addEventListener("resize", () => state.selected && loadTransitions());
    loop();
  }

  init();
})();
