/* bakeoff dashboard: draws the page's charts from its JSON block with Chart.js, and submits a
   filter form when one of its selects changes. No inline script: the page's CSP allows only this
   installation's own files. Labels are set as text by Chart.js (canvas), never as HTML. */
(function () {
  "use strict";
  document.querySelectorAll("form[data-autosubmit] select").forEach(function (el) {
    el.addEventListener("change", function () { el.form.submit(); });
  });
  var block = document.getElementById("chart-data");
  if (!block || typeof Chart === "undefined") { return; }
  var specs = JSON.parse(block.textContent);
  var palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"];
  Chart.defaults.animation = false;
  specs.forEach(function (spec, i) {
    var canvas = document.querySelector("canvas[data-chart='" + i + "']");
    if (!canvas) { return; }
    var colour = {}, n = 0;
    function colourOf(name) {
      if (!(name in colour)) { colour[name] = palette[n++ % palette.length]; }
      return colour[name];
    }
    var datasets = spec.datasets.map(function (ds) {
      var c = ds.colour || colourOf(ds.group || ds.label.replace(/ \(Pareto\)$/, ""));
      return {
        label: ds.label, data: ds.data, showLine: !!ds.line, borderColor: c, backgroundColor: c,
        // a level the client set the pace for is drawn hollow: not the hardware's figure
        pointBackgroundColor: ds.data.map(function (p) { return p && p.hollow ? "#fff" : c; }),
        borderDash: ds.dashed ? [5, 4] : [], borderWidth: ds.dashed ? 1 : 2,
        pointRadius: ds.dashed ? 0 : (ds.pareto ? 0 : 3), spanGaps: true, tension: 0
      };
    });
    if (spec.events && spec.events.length) {
      datasets.push({ label: "not provisioned / accuracy failed", data: spec.events, showLine: false,
        pointStyle: "triangle", pointRadius: 7, borderColor: "#000", backgroundColor: "#fc0" });
    }
    var x = spec.kind === "category"
      ? { type: "linear", min: -0.5, max: spec.labels.length - 0.5, title: { display: true, text: spec.x },
          afterBuildTicks: function (axis) { axis.ticks = spec.labels.map(function (_, k) { return { value: k }; }); },
          ticks: { autoSkip: true, maxRotation: 45, callback: function (v) { return spec.labels[v] || ""; } } }
      : { type: "linear", title: { display: true, text: spec.x } };
    // an emulated run's chart carries the same watermark as the report's charts
    var watermark = { id: "emulated", afterDraw: function (chart) {
      if (!spec.emulated) { return; }
      var ctx = chart.ctx, area = chart.chartArea;
      ctx.save();
      ctx.translate((area.left + area.right) / 2, (area.top + area.bottom) / 2);
      ctx.rotate(-0.35);
      ctx.font = "bold 44px sans-serif";
      ctx.fillStyle = "rgba(192, 0, 0, 0.14)";
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText("EMULATED", 0, 0);
      ctx.restore();
    } };
    new Chart(canvas, {
      type: "scatter",
      plugins: [watermark],
      data: { datasets: datasets },
      options: {
        responsive: true, maintainAspectRatio: false, parsing: true,
        scales: { x: x, y: { title: { display: true, text: spec.y }, beginAtZero: true } },
        plugins: {
          legend: { position: "right", labels: { filter: function (item) { return !/(95% (low|high)| \(Pareto\))$/.test(item.text); } } },
          tooltip: { callbacks: { label: function (ctx) {
            var p = ctx.raw || {};
            var where = spec.kind === "category" ? (spec.labels[p.x] || "") : ("x " + Number(p.x).toPrecision(4));
            return (p.label || ctx.dataset.label) + ": " + where + ", " + Number(p.y).toPrecision(4);
          } } }
        }
      }
    });
  });
})();
