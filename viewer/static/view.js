// ept view: strategy toggles, the frontier toggle and the hover tooltip of the Elo-vs-tokens plot.
// Served from the package (no CDN); the page works without it (every point has an SVG <title>).
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var plot = document.getElementById("elo-plot");
  if (!plot) return;
  var tip = document.getElementById("tip");
  document.querySelectorAll("#toggles input[data-strategy]").forEach(function (box) {
    box.addEventListener("change", function () {
      var s = box.getAttribute("data-strategy");
      plot.querySelectorAll("g.pt").forEach(function (g) {
        if (g.getAttribute("data-strategy") === s) g.classList.toggle("off", !box.checked);
      });
    });
  });
  var front = document.getElementById("show-frontier");
  var line = document.getElementById("frontier-line");
  if (front && line) front.addEventListener("change", function () { line.classList.toggle("off", !front.checked); });
  plot.querySelectorAll("g.pt").forEach(function (g) {
    g.addEventListener("mouseenter", function (ev) {
      tip.textContent = g.getAttribute("data-tip");  // text, never HTML: arm names are untrusted
      tip.hidden = false;
      var box = plot.parentElement.getBoundingClientRect();
      tip.style.left = (ev.clientX - box.left + 12) + "px";
      tip.style.top = (ev.clientY - box.top + 12) + "px";
    });
    g.addEventListener("mouseleave", function () { tip.hidden = true; });
    g.addEventListener("click", function () {
      var row = document.querySelector('#arm-links a[href$="arm=' + encodeURIComponent(g.getAttribute("data-arm")).replace(/%20/g, "+") + '"]');
      if (row) window.location.href = row.getAttribute("href");
    });
  });
});
