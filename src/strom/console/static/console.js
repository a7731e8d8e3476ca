// strom console: the only script. Pages work without it; it refreshes the throughput
// sparkline and enables the form fields the chosen start mode uses.
(function () {
  "use strict";

  function refreshSparkline() {
    var box = document.getElementById("throughput");
    if (!box) return;
    var seconds = parseFloat(box.getAttribute("data-interval")) || 0;
    if (seconds <= 0) return;
    setInterval(function () {
      fetch(box.getAttribute("data-refresh"), { headers: { Accept: "text/html" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) return;
          var next = new DOMParser().parseFromString(html, "text/html").getElementById("throughput");
          var current = document.getElementById("throughput");
          if (next && current) current.replaceWith(next);
        })
        .catch(function () {});
    }, seconds * 1000);
  }

  function startModeFields() {
    var mode = document.getElementById("mode");
    if (!mode) return;
    var form = mode.form;
    function sync() {
      form.elements.offset.disabled = mode.value !== "offset";
      form.elements.timestamp.disabled = mode.value !== "timestamp";
    }
    mode.addEventListener("change", sync);
    sync();
  }

  document.addEventListener("DOMContentLoaded", function () {
    refreshSparkline();
    startModeFields();
  });
})();
