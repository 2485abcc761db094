// Quantities and durations written as the CLI writes them; shared by the dashboard and
// inlined into the simulator's HTML report. Exposed as window.koordQueue.
"use strict";

window.koordQueue = (() => {
  const BINARY = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
  const DECIMAL = ["k", "M", "G", "T", "P", "E"];

  // The largest suffix (powers of base) that divides units exactly.
  function withSuffix(units, base, suffixes) {
    let best = String(units);
    for (let power = 1; power <= suffixes.length; power++) {
      const step = base ** power;
      if (units % step !== 0) break;
      best = `${units / step}${suffixes[power - 1]}`;
    }
    return best;
  }

  // Milli-units as a person reads them: 1500m, 8, 200Gi, 4k (koordqueue.api.quantity.format_quantity).
  function formatQuantity(milli) {
    if (milli === null || milli === undefined) return "-";
    const sign = milli < 0 ? "-" : "";
    const amount = Math.abs(milli);
    if (amount % 1000 !== 0) return `${sign}${amount}m`;
    const units = amount / 1000;
    if (units === 0) return "0";
    const candidates = [withSuffix(units, 1024, BINARY), withSuffix(units, 1000, DECIMAL), String(units)];
    return sign + candidates.reduce((best, text) => (text.length < best.length ? text : best));
  }

  function formatAge(seconds) {
    if (seconds === null || seconds === undefined) return "-";
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  }

  return { formatQuantity, formatAge };
})();
