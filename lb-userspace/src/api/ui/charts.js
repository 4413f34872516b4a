// Rates and charts of the Live Stats page: counter deltas between polls turned into
// per-second rates, a ring of the last minutes per series (starting from the minutes the
// daemon sampled before the page opened), and hand-written SVG charts (sparklines and the
// overview chart). No library, no external resources.
(() => {
  "use strict";

  const SVG = "http://www.w3.org/2000/svg";
  /** How much history a series keeps (and the charts show at most). */
  const WINDOW_MS = 5 * 60 * 1000;
  /** Polls closer together than this do not make a rate (see `Rates.observe`). */
  const MIN_DT_MS = 500;
  /** The shortest time span a chart shows (a page just opened has seconds of history). */
  const MIN_WINDOW_MS = 60 * 1000;

  /** The span the charts show: the history held so far, between one and five minutes. */
  function windowFor(firstT, now) {
    const held = now - firstT;
    return Math.min(WINDOW_MS, Math.max(MIN_WINDOW_MS, Math.ceil(held / 30000) * 30000));
  }

  /** "−45 s", "−1.5 min", "−3 min". */
  function agoLabel(ms) {
    if (ms === 0) return "now";
    if (ms < 60000) return `−${Math.round(ms / 1000)} s`;
    const m = ms / 60000;
    return `−${Number.isInteger(m) ? m : m.toFixed(1)} min`;
  }

  /**
   * Per-second rates from successive polls. `observe(t, key, counter)` returns the rate
   * since the previous poll (on the first one: the rate the daemon sampled last, given by
   * `seed`, else null); a counter that went down (the daemon restarted) gives 0 and starts
   * again from its new value instead of a negative rate.
   */
  class Rates {
    constructor() {
      this.last = new Map(); // key -> {t, v}
      this.rings = new Map(); // key -> [{t, r}]
      this.seeds = new Map(); // key -> the daemon's latest rate, for the first poll
    }

    observe(t, key, value, keepHistory) {
      if (value === undefined || value === null || !Number.isFinite(Number(value))) return null;
      const v = Number(value);
      const prev = this.last.get(key);
      if (!prev || t < prev.t) {
        const seeded = prev ? null : this.seeds.get(key) ?? null;
        this.seeds.delete(key);
        this.last.set(key, { t, v, r: seeded });
        return seeded;
      }
      // A poll right after another (the page refreshes at once after a toggle) would divide
      // a few requests by a few milliseconds: keep the previous rate and baseline.
      if (t - prev.t < MIN_DT_MS) return prev.r;
      const rate = v >= prev.v ? ((v - prev.v) * 1000) / (t - prev.t) : 0;
      this.last.set(key, { t, v, r: rate });
      if (keepHistory) this.push(key, t, rate);
      return rate;
    }

    /** Adds a point to a series' ring (for sums built by the caller). */
    push(key, t, rate) {
      let ring = this.rings.get(key);
      if (!ring) this.rings.set(key, (ring = []));
      if (ring.length && t - ring[ring.length - 1].t < MIN_DT_MS) return;
      ring.push({ t, r: rate });
      while (ring.length && ring[0].t < t - WINDOW_MS) ring.shift();
    }

    series(key) {
      return this.rings.get(key) || [];
    }

    /**
     * Takes what the daemon sampled before the page opened: the newest of `points` ([{t, r}],
     * oldest first; a null rate is a second it could not read) is what the first poll shows
     * (`observe` has no previous poll to divide by), and with `keepHistory` they become the
     * series' ring.
     */
    seed(key, points, keepHistory) {
      const known = points.filter((p) => typeof p.r === "number" && Number.isFinite(p.r));
      if (known.length === 0) return;
      const newest = points[points.length - 1];
      if (newest === known[known.length - 1]) this.seeds.set(key, newest.r);
      if (keepHistory) {
        const end = newest.t;
        this.rings.set(key, known.filter((p) => p.t >= end - WINDOW_MS));
      }
    }

    /** Forgets series not seen in the latest poll (a removed vService or backend). */
    retain(keys) {
      for (const k of [...this.last.keys()]) if (!keys.has(k)) this.last.delete(k);
      for (const k of [...this.rings.keys()]) if (!keys.has(k)) this.rings.delete(k);
      this.seeds.clear();
    }
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) node.setAttribute(k, String(v));
    }
    for (const c of children) if (c) node.append(c);
    return node;
  }

  /** A "nice" ceiling for a chart's scale: 1, 2 or 5 times a power of ten. */
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const pow = 10 ** Math.floor(Math.log10(v));
    const f = v / pow;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * pow;
  }

  const fmt = (p) => p.toFixed(1);

  /**
   * A sparkline of `points` ([{t, r}]) over the last window ending at `now`: a filled area
   * under a polyline, scaled to its own maximum. `testid` names the SVG for tests.
   */
  function sparkline(points, now, opts) {
    const w = opts.width || 160;
    const h = opts.height || 32;
    const cls = opts.cls || "series-a";
    const span = opts.window || WINDOW_MS;
    const t0 = now - span;
    const shown = points.filter((p) => p.t >= t0);
    const max = niceMax(shown.reduce((m, p) => Math.max(m, p.r), 0));
    const xy = shown.map((p) => [((p.t - t0) / span) * w, h - 1 - (p.r / max) * (h - 2)]);
    const root = svg("svg", {
      class: "spark",
      viewBox: `0 0 ${w} ${h}`,
      width: w,
      height: h,
      preserveAspectRatio: "none",
      "data-testid": opts.testid,
      "data-points": xy.length,
      role: "img",
      "aria-label": opts.label || "rate over the last minutes",
      "data-max": max,
    });
    root.append(svg("line", { class: "baseline", x1: 0, y1: h - 0.5, x2: w, y2: h - 0.5 }));
    if (xy.length >= 2) {
      const line = xy.map(([x, y]) => `${fmt(x)},${fmt(y)}`).join(" ");
      root.append(
        svg("polygon", { class: `area ${cls}`, points: `${fmt(xy[0][0])},${h} ${line} ${fmt(xy[xy.length - 1][0])},${h}` }),
        svg("polyline", { class: `line ${cls}`, points: line }),
      );
    }
    root.append(svg("title", {}, document.createTextNode(opts.label || "")));
    return root;
  }

  /**
   * The overview chart: several series on one scale with a labelled rate axis and a time
   * axis of the last five minutes. `series` is [{key, label, cls, points}].
   */
  function overview(series, now, opts) {
    const w = opts.width || 640;
    const h = opts.height || 170;
    const m = { left: 54, right: 12, top: 10, bottom: 22 };
    const iw = w - m.left - m.right;
    const ih = h - m.top - m.bottom;
    const span = opts.window || WINDOW_MS;
    const t0 = now - span;
    const peak = series.reduce((acc, s) => s.points.filter((p) => p.t >= t0).reduce((a, p) => Math.max(a, p.r), acc), 0);
    const max = niceMax(peak * 1.1);
    const x = (t) => m.left + ((t - t0) / span) * iw;
    const y = (r) => m.top + ih - (r / max) * ih;
    const root = svg("svg", {
      class: "overview",
      viewBox: `0 0 ${w} ${h}`,
      width: w,
      height: h,
      "data-testid": opts.testid,
      role: "img",
      "aria-label": opts.label,
    });
    for (let i = 0; i <= 4; i += 1) {
      const v = (max * i) / 4;
      const yy = fmt(y(v));
      root.append(
        svg("line", { class: i === 0 ? "axis" : "grid", x1: m.left, y1: yy, x2: m.left + iw, y2: yy }),
        svg("text", { class: "tick", x: m.left - 6, y: yy, "text-anchor": "end", "dominant-baseline": "middle" },
          document.createTextNode(opts.fmt(v))),
      );
    }
    const step = span <= 60000 ? 15000 : span <= 150000 ? 30000 : 60000;
    for (let ago = span; ago >= 0; ago -= step) {
      const xx = fmt(x(now - ago));
      root.append(
        svg("line", { class: "grid", x1: xx, y1: m.top, x2: xx, y2: m.top + ih }),
        svg("text", { class: "tick", x: xx, y: h - 6, "text-anchor": ago === span ? "start" : ago === 0 ? "end" : "middle" },
          document.createTextNode(agoLabel(ago))),
      );
    }
    for (const s of series) {
      const pts = s.points.filter((p) => p.t >= t0).map((p) => `${fmt(x(p.t))},${fmt(y(p.r))}`);
      const line = svg("polyline", {
        class: `line ${s.cls}`,
        points: pts.join(" "),
        "data-testid": `${opts.testid}-${s.key}`,
        "data-points": pts.length,
      });
      line.append(svg("title", {}, document.createTextNode(s.label)));
      root.append(line);
    }
    return root;
  }

  window.LbCharts = { Rates, sparkline, overview, windowFor, WINDOW_MS };
})();
