// The console works without this file; it only adds the copy button for a newly issued key.
// Only a secure context (HTTPS, or loopback) has a clipboard: elsewhere, on plain HTTP by a host
// name, the button stays hidden and the key, shown on the page, is selected and copied by hand.
if (window.isSecureContext && navigator.clipboard) {
  document.querySelectorAll("button[data-copy]").forEach(function (b) {
    b.hidden = false;
    b.addEventListener("click", function () {
      var text = document.getElementById(b.dataset.copy).textContent;
      navigator.clipboard.writeText(text).then(
        function () { b.textContent = "Copied"; },
        function () { b.textContent = "Not copied: select the key and copy it"; });
    });
  });
}
