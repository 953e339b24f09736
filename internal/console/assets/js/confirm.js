// confirm asks before an action, in the page's own dialog (no window.confirm). With
// askName it also asks for a name, returned instead of true.
export function confirm(text, askName) {
  const d = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  const label = document.getElementById('confirm-input-label');
  const input = document.getElementById('confirm-input');
  label.hidden = !askName;
  input.value = askName || '';
  return new Promise(resolve => {
    d.addEventListener('close', () => {
      if (d.returnValue !== 'ok') resolve(false);
      else resolve(askName ? input.value : true);
    }, { once: true });
    d.returnValue = '';
    d.showModal();
  });
}
