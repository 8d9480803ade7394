// musterd's console in a real browser (Debian's chromium, headless, driven
// over the DevTools protocol by puppeteer-core): sign-in, the cluster table,
// a failing job's root cause, injected HTML shown as text, live updates
// without a reload, a job token that sees one job, 401 without a token, and
// the page's Content-Security-Policy.
//
// usage: node console_browser_test.mjs BASE_URL   with, in the environment:
//   ADMIN_TOKEN, JOB_TOKEN (the token of job "tokjob" only),
//   LIVE_CMD (a shell command that starts job "livejob"),
//   SHOTS (optional: a directory for screenshots of the two pages)
import {spawn} from 'node:child_process';
import puppeteer from 'puppeteer-core';

const base = process.argv[2];
const {ADMIN_TOKEN, JOB_TOKEN, LIVE_CMD, SHOTS} = process.env;
let failures = 0;
function check(ok, what) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failures++;
}

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  // root in a container: chromium's sandbox needs user namespaces.
  // SPKI: musterd's HTTPS key, trusted by its hash (the test's self-signed
  // certificate); every other certificate error still fails.
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
    ...(process.env.SPKI ?
      [`--ignore-certificate-errors-spki-list=${process.env.SPKI}`] : [])],
});
const deadline = setTimeout(() => {
  console.log('FAIL the browser test ran past 150 s');
  process.exit(1);
}, 150000);

async function signedIn(token) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  const problems = [];
  page.on('pageerror', (e) => problems.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/401/.test(m.text())) problems.push(m.text());
  });
  const response = await page.goto(base + '/');
  await page.waitForSelector('#signin:not([hidden])');
  await page.type('#token', token);
  await page.click('#signin-form button');
  await page.waitForSelector('#cluster:not([hidden])');
  return {page, response, problems};
}

const rows = (page) => page.$$eval('#jobs tbody tr', (trs) =>
    trs.map((tr) => Array.from(tr.cells, (td) => td.textContent)));

try {
  // No token: the page asks for one; the API answers 401.
  {
    const context = await browser.createBrowserContext();
    const page = await context.newPage();
    await page.goto(base + '/');
    await page.waitForSelector('#signin:not([hidden])', {timeout: 15000});
    const status = await page.evaluate(
        async () => (await fetch('/api/v1/jobs')).status);
    check(status === 401, `no token: /api/v1/jobs answers ${status}, 401 expected`);
    const shown = await page.$$eval('#jobs tbody tr', (t) => t.length);
    check(shown === 0, 'no token: no job is shown');
    await context.close();
  }

  // The admin token: every job, the failing one's root cause as text.
  const {page, response, problems} = await signedIn(ADMIN_TOKEN);
  const csp = response.headers()['content-security-policy'] || '';
  check(/script-src 'self'/.test(csp) && !/unsafe-inline/.test(csp),
        `the page has a strict Content-Security-Policy (${csp})`);
  await page.waitForFunction(
      () => document.querySelectorAll('#jobs tbody tr').length >= 2);
  const listed = await rows(page);
  const byId = Object.fromEntries(listed.map((r) => [r[0], r]));
  check(byId.failjob && byId.failjob[1] === 'FAILED',
        `admin sees failjob FAILED (${JSON.stringify(byId.failjob)})`);
  check(byId.tokjob && byId.tokjob[1] === 'RUNNING',
        `admin sees tokjob RUNNING (${JSON.stringify(byId.tokjob)})`);
  await page.waitForFunction(() => document.querySelector('#c-jobs').textContent !== '');
  const cards = await page.evaluate(() => ({
    jobs: document.querySelector('#c-jobs').textContent,
    agents: document.querySelector('#c-agents').textContent,
    replica: document.querySelector('#replica').textContent,
  }));
  check(Number(cards.jobs) >= 3 && Number(cards.agents) === 3 && cards.replica === 'serving',
        `the cluster's totals: ${JSON.stringify(cards)}`);
  if (SHOTS) await page.screenshot({path: `${SHOTS}/console-cluster.png`});

  // Live: a job started now appears without a reload.
  await page.evaluate(() => { window.__sameDocument = true; });
  const live = spawn('sh', ['-c', LIVE_CMD], {stdio: 'ignore', detached: true});
  const started = Date.now();
  await page.waitForFunction(
      () => Array.from(document.querySelectorAll('#jobs tbody tr'))
                .some((tr) => tr.cells[0].textContent === 'livejob'),
      {timeout: 20000});
  const same = await page.evaluate(() => window.__sameDocument === true);
  check(same, `livejob appeared without a reload, ${Date.now() - started} ms after its start`);

  // The failing job's page: the root cause, the injected HTML as text.
  await page.click('#jobs a[href="/jobs/failjob"]');
  await page.waitForFunction(() => document.querySelector('#job-failure')
                                       .textContent.includes('exited with code 3'));
  const failure = await page.$eval('#job-failure', (e) => e.textContent);
  check(/worker rank 1 .* exited with code 3/.test(failure),
        `failjob's root cause names rank 1 and code 3: ${failure}`);
  check(failure.includes('<img src=x onerror="window.__pwned=1">'),
        'the worker\'s HTML shows as text');
  const injected = await page.evaluate(
      () => document.querySelectorAll('#job img, #jobs img').length);
  const pwned = await page.evaluate(() => window.__pwned);
  check(injected === 0 && pwned === undefined,
        `the worker's HTML made no element (${injected}) and ran nothing (${pwned})`);
  const timeline = await page.$$eval('#timeline tbody tr', (trs) =>
      trs.map((tr) => Array.from(tr.cells, (td) => td.textContent)));
  check(timeline.length === 1 && timeline[0][0] === '1' && timeline[0][4] === 'failed' &&
        timeline[0][5].includes('exited with code 3'),
        `failjob's timeline: round 1 ended by its failure (${JSON.stringify(timeline)})`);
  const members = await page.$$eval('#members tbody tr', (t) => t.length);
  check(members === 2, `failjob's page lists its 2 members (${members})`);
  if (SHOTS) await page.screenshot({path: `${SHOTS}/console-job.png`});

  // A hung job's stacks, on demand: grouped, the odd rank out marked.
  await page.goto(base + '/jobs/hangjob');
  await page.waitForSelector('#job:not([hidden])');
  await page.waitForSelector('#store-box:not([hidden])');
  const store = await page.$eval('#store-box', (b) => [
    b.querySelector('#store-prefix').textContent,
    b.querySelector('#store-keys').textContent,
    b.querySelector('#store-bytes').textContent]);
  check(/^\(hangjob\/\d+\)$/.test(store[0]) && /^\d+ of 1048576$/.test(store[1]) &&
        / of 256\.0 MiB$/.test(store[2]),
        `hangjob's Store use against the limits: ${JSON.stringify(store)}`);
  await page.click('#stacks-button');
  await page.waitForSelector('#stacks .group', {timeout: 30000});
  const groups = await page.$$eval('#stacks .group', (gs) => gs.map((g) => ({
    odd: g.classList.contains('odd'),
    title: g.querySelector('h3').textContent,
    frames: Array.from(g.querySelectorAll('li'), (li) => li.textContent),
  })));
  const odd = groups.filter((g) => g.odd);
  check(odd.length === 1 && /^ranks 3 \(1\)/.test(odd[0].title) &&
        odd[0].frames.some((f) => f.includes('stuck_in_data_loader')),
        `hangjob's odd rank out is rank 3 in stuck_in_data_loader: ${JSON.stringify(odd)}`);
  const rest = groups.filter((g) => !g.odd);
  check(rest.length === 1 && /^ranks 0-2 \(3\)/.test(rest[0].title) &&
        rest[0].frames.some((f) => f.includes('wait_in_allreduce')),
        `ranks 0-2 wait in wait_in_allreduce: ${JSON.stringify(rest)}`);
  if (SHOTS) await page.screenshot({path: `${SHOTS}/console-stacks.png`, fullPage: true});
  check(problems.length === 0, `no script error or policy violation: ${problems}`);
  try { process.kill(-live.pid, 'SIGTERM'); } catch (e) { /* ended */ }

  // A job's token: that job only.
  const job = await signedIn(JOB_TOKEN);
  await job.page.waitForFunction(
      () => document.querySelectorAll('#jobs tbody tr').length >= 1);
  await new Promise((r) => setTimeout(r, 1500));  // a refresh or two
  const mine = (await rows(job.page)).map((r) => r[0]);
  check(mine.length === 1 && mine[0] === 'tokjob',
        `the job token sees tokjob only (${mine})`);
  const other = await job.page.evaluate(async (t) => (await fetch(
      '/api/v1/jobs/failjob', {headers: {Authorization: 'Bearer ' + t}})).status,
      JOB_TOKEN);
  check(other === 403, `the job token gets ${other} for another job, 403 expected`);
  const stored = await job.page.evaluate(() => location.href + document.body.innerText);
  check(!stored.includes(JOB_TOKEN), 'the token is in neither the URL nor the page');
} catch (e) {
  check(false, `the browser test threw: ${e.stack || e}`);
} finally {
  clearTimeout(deadline);
  await browser.close();
}
process.exit(failures === 0 ? 0 : 1);
