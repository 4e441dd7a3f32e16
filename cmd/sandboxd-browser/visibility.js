// Runs in an isolated world of the rendered page (the DOM is shared, the
// page's globals are not): removes every element and text the browser
// does not show a reader, then serialises the document. Errs on the side
// of removing. Returns {html, title, hidden}.
(() => {
  const MAX_ELEMENTS = 300000;
  const doc = document;
  const root = doc.documentElement;
  if (!root) return { html: "", title: "", hidden: 0 };
  const vw = window.innerWidth, vh = window.innerHeight;
  const sx = window.scrollX, sy = window.scrollY;
  const parse = (c) => {
    if (!c) return null;
    const m = /rgba?\(([^)]*)\)/.exec(c);
    if (!m) return c === "transparent" ? { r: 0, g: 0, b: 0, a: 0 } : null;
    const p = m[1].split(/[\s,\/]+/).filter(Boolean).map(parseFloat);
    if (p.length < 3 || p.some(isNaN)) return null;
    return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 };
  };
  const styles = new Map();
  const style = (el) => {
    let s = styles.get(el);
    if (!s) { s = getComputedStyle(el); styles.set(el, s); }
    return s;
  };
  // The colour painted behind el: the nearest opaque background; null
  // when an image or a translucent colour makes it unknown.
  const bgCache = new Map();
  const background = (el) => {
    if (bgCache.has(el)) return bgCache.get(el);
    let out = { r: 255, g: 255, b: 255, a: 1 };
    for (let e = el; e; e = e.parentElement) {
      const s = style(e);
      if (s.backgroundImage && s.backgroundImage !== "none") { out = null; break; }
      const c = parse(s.backgroundColor);
      if (c && c.a >= 0.99) { out = c; break; }
      if (c && c.a > 0.01) { out = null; break; }
    }
    bgCache.set(el, out);
    return out;
  };
  const near = (a, b) => Math.abs(a.r - b.r) <= 16 && Math.abs(a.g - b.g) <= 16 && Math.abs(a.b - b.b) <= 16;
  const intersects = (r, c) => r.right > c.left && r.left < c.right && r.bottom > c.top && r.top < c.bottom;
  const area = (r) => Math.max(0, r.width) * Math.max(0, r.height);
  const clipOf = new Map();
  const opacityOf = new Map();
  const hiddenEls = new Set();
  const doc0 = { left: -sx, top: -sy, right: Infinity, bottom: Infinity };
  // What a reader can reach: scrolling shows what is below and, within
  // the page's width, to the right; nothing above or left of the page,
  // nor right of the viewport.
  const page = { left: -sx, top: -sy, right: vw - sx + Math.max(0, root.scrollWidth - vw), bottom: Infinity };
  const skipTags = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "HEAD", "TITLE", "META", "LINK", "BASE"]);
  let removedText = 0;
  const textToRemove = [];

  const checkText = (el, s, opacity) => {
    let invisible = s.visibility !== "visible" || parseFloat(s.fontSize) < 3 || opacity <= 0.1;
    if (!invisible) {
      const fg = parse(s.color), fill = parse(s.webkitTextFillColor);
      if ((fg && fg.a <= 0.1) || (fill && fill.a <= 0.1)) invisible = true;
      else if (fg) {
        const bg = background(el);
        if (bg && near(fg, bg)) invisible = true;
      }
    }
    const clip = clipOf.get(el) || page;
    for (const n of el.childNodes) {
      if (n.nodeType !== 3 || !/\S/.test(n.data)) continue;
      if (invisible) { textToRemove.push(n); continue; }
      const range = doc.createRange();
      range.selectNodeContents(n);
      const rects = Array.from(range.getClientRects());
      const shown = rects.some((r) => r.width >= 1 && r.height >= 3 && intersects(r, clip) && intersects(r, page));
      if (!shown) textToRemove.push(n);
    }
  };

  let count = 0;
  const walker = doc.createTreeWalker(root, NodeFilter.SHOW_ELEMENT);
  for (let el = walker.currentNode; el; el = walker.nextNode()) {
    if (++count > MAX_ELEMENTS) { hiddenEls.add(el); continue; }
    const parent = el.parentElement;
    if (parent && hiddenEls.has(parent)) { hiddenEls.add(el); continue; }
    if (skipTags.has(el.tagName)) continue;
    const s = style(el);
    const parentOpacity = parent ? (opacityOf.get(parent) ?? 1) : 1;
    const opacity = parentOpacity * (parseFloat(s.opacity) || 0);
    opacityOf.set(el, opacity);
    const visible = el.checkVisibility ? el.checkVisibility({ checkOpacity: true, opacityProperty: true, contentVisibilityAuto: true }) : s.display !== "none";
    if (el !== root && el !== doc.body && (!visible || opacity <= 0.1)) { hiddenEls.add(el); continue; }
    let clip = parent ? (clipOf.get(parent) || page) : page;
    if (s.position === "fixed") clip = { left: 0, top: 0, right: vw, bottom: vh };
    if (s.display !== "contents" && el !== root && el !== doc.body) {
      const r = el.getBoundingClientRect();
      const clips = s.overflowX !== "visible" || s.overflowY !== "visible" || (s.clip && s.clip !== "auto") || (s.clipPath && s.clipPath !== "none");
      if (clips && (r.width <= 1 || r.height <= 1)) { hiddenEls.add(el); continue; }
      if (area(r) > 0 && (!intersects(r, clip) || !intersects(r, page))) { hiddenEls.add(el); continue; }
      // Content a reader can scroll to (overflow auto or scroll) is not
      // clipped; hidden and clip overflow is.
      const hides = (v) => v === "hidden" || v === "clip";
      if (hides(s.overflowX) || hides(s.overflowY) || (s.clip && s.clip !== "auto") || (s.clipPath && s.clipPath !== "none")) {
        clip = { left: Math.max(clip.left, r.left), top: Math.max(clip.top, r.top), right: Math.min(clip.right, r.right), bottom: Math.min(clip.bottom, r.bottom) };
      }
    }
    clipOf.set(el, clip);
    checkText(el, s, opacity);
  }
  // Remove the outermost hidden elements, then the hidden text.
  let hidden = 0;
  for (const el of hiddenEls) {
    if (el === root || el === doc.body) continue;
    const p = el.parentElement;
    if (p && hiddenEls.has(p)) continue;
    el.remove();
    hidden++;
  }
  for (const n of textToRemove) {
    if (n.parentNode) { n.remove(); removedText++; }
  }
  void doc0;
  const dt = doc.doctype ? "<!DOCTYPE " + doc.doctype.name + ">\n" : "";
  return { html: dt + root.outerHTML, title: String(doc.title || ""), hidden: hidden + removedText };
})()
