// Nucleus console, Topics page: progressive enhancement of the server-rendered SVG map.
// Hovering (or focusing) a point writes its document's title into #point-info as text;
// clicking a point opens its topic's members (the same link as the topic table's).
// No inline script anywhere (CSP script-src 'self'); titles are only ever set with textContent.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var map = document.getElementById("topic-map");
  var info = document.getElementById("point-info");
  if (!map || !info) { return; }
  function show(point) {
    info.textContent = (point.dataset.title || point.dataset.artifact) + " (topic " + point.dataset.topic + ")";
    map.querySelectorAll("circle.hover").forEach(function (c) { c.classList.remove("hover"); });
    point.classList.add("hover");
  }
  map.querySelectorAll("circle.pt").forEach(function (point) {
    point.setAttribute("tabindex", "0");
    point.addEventListener("mouseenter", function () { show(point); });
    point.addEventListener("focus", function () { show(point); });
    point.addEventListener("click", function () {
      var link = document.querySelector('tr.topic[data-topic="' + point.dataset.topic + '"] a.topic-link');
      if (link) { window.location.assign(link.href); }
    });
  });
});
