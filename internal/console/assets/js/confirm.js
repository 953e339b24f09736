// confirm asks before an action, in the page's own dialog (no window.confirm). With
// askName it also asks for a name, returned instead of true.
//
// The dialog's close event is dispatched after it closed, in a task of its own, and a
// click is handled before it: an opening that follows a close at once (two actions
// clicked in quick succession) could see the earlier opening's close event, answer
// "no" to it and leave the confirmation it shows with nobody listening. So one listener
// answers whichever opening is current, a close event that comes while the dialog is
// open again is not that opening's, and an opening whose event has not come yet when
// the next one starts is answered "no" (nothing is done for it).
let settle = null; // answers the current opening; null when none waits
let listening = false;

export function confirm(text, askName) {
  const d = document.getElementById('confirm');
  if (!listening) {
    listening = true;
    d.addEventListener('close', () => {
      if (!d.open && settle) settle(d.returnValue === 'ok');
    });
  }
  if (settle) settle(false);
  document.getElementById('confirm-text').textContent = text;
  const label = document.getElementById('confirm-input-label');
  const input = document.getElementById('confirm-input');
  label.hidden = !askName;
  input.value = askName || '';
  return new Promise(resolve => {
    settle = ok => {
      settle = null;
      resolve(ok ? (askName ? input.value : true) : false);
    };
    d.returnValue = '';
    d.showModal();
  });
}
