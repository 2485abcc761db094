// The simulator report's one bit of behaviour: point at (or focus and use the arrow keys
// on) a time plot to read every series' value at that moment. The numbers come from
// each line's data-points, the same numbers the page embeds as JSON.
"use strict";

(() => {
  const { formatQuantity } = window.koordQueue;
  const SVG = "http://www.w3.org/2000/svg";

  // The value of a step series at time t: that of the last point at or before t.
  function valueAt(points, t) {
    let low = 0;
    let high = points.length - 1;
    while (low < high) {
      const middle = (low + high + 1) >> 1;
      if (points[middle][0] <= t) low = middle;
      else high = middle - 1;
    }
    return points[low][1];
  }

  function timeText(seconds) {
    return seconds >= 3600 ? `${(seconds / 3600).toFixed(2)} h` : seconds >= 120 ? `${(seconds / 60).toFixed(1)} min`
      : `${seconds.toFixed(1)} s`;
  }

  for (const figure of document.querySelectorAll("figure.chart")) {
    const svg = figure.querySelector("svg.plot");
    if (!["usage", "queue", "nodes"].includes(svg.dataset.kind)) continue;
    const readout = figure.querySelector(".readout");
    const series = [...svg.querySelectorAll("path.series")].map((path) => ({
      name: path.dataset.series, points: JSON.parse(path.dataset.points),
    }));
    const format = figure.dataset.format === "quantity" ? formatQuantity : String;
    const left = Number(svg.dataset.left);
    const right = Number(svg.dataset.right);
    const span = Number(svg.dataset.xTop);
    const marker = document.createElementNS(SVG, "line");
    marker.setAttribute("class", "marker");
    marker.setAttribute("y1", "0");
    marker.setAttribute("y2", String(svg.viewBox.baseVal.height));
    marker.style.display = "none";
    svg.append(marker);
    let shownTime = 0;

    function show(t) {
      shownTime = Math.max(0, Math.min(span, t));
      const x = left + ((right - left) * shownTime) / span;
      marker.setAttribute("x1", String(x));
      marker.setAttribute("x2", String(x));
      marker.style.display = "";
      readout.textContent = `At ${timeText(shownTime)}: ` +
        series.map((s) => `${s.name} ${format(Math.round(valueAt(s.points, shownTime)))}`).join(", ");
    }

    function hide() {
      marker.style.display = "none";
      readout.textContent = readout.dataset.hint;
    }

    svg.setAttribute("tabindex", "0");
    hide();
    svg.addEventListener("pointermove", (event) => {
      const box = svg.getBoundingClientRect();
      const x = ((event.clientX - box.left) * svg.viewBox.baseVal.width) / box.width;
      show(((x - left) / (right - left)) * span);
    });
    svg.addEventListener("pointerleave", hide);
    svg.addEventListener("blur", hide);
    svg.addEventListener("keydown", (event) => {
      const step = span / 100;
      if (event.key === "ArrowRight") show(shownTime + step);
      else if (event.key === "ArrowLeft") show(shownTime - step);
      else if (event.key === "Home") show(0);
      else if (event.key === "End") show(span);
      else return;
      event.preventDefault();
    });
  }
})();
