// Drives a real `kvgate serve` with the official `openai` npm client: lists the model and
// retrieves it by id, runs a greedy completion and the same completion streamed (with
// include_usage), the same prompt through chat completions (plain and streamed: the same greedy
// text), checks that invalid requests surface as APIErrors with our error shape, then stops the
// server with SIGTERM and expects exit code 0.
//
// usage: node openai_client_test.mjs <path/to/kvgate> [serve flags...]
// Exits 0 on success, 1 on failure, 77 (CTest SKIP_RETURN_CODE) when node_modules is missing.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';

const here = dirname(fileURLToPath(import.meta.url));
if (!existsSync(join(here, 'node_modules', 'openai'))) {
  console.log(`SKIP: run \`npm ci\` in ${here} first`);
  process.exit(77);
}
const { default: OpenAI, APIError } = await import('openai');

const [kvgate, ...serveFlags] = process.argv.slice(2);
if (!kvgate) {
  console.error('usage: node openai_client_test.mjs <kvgate> [serve flags...]');
  process.exit(1);
}

// Starts the server and resolves with its address once it prints `listening on HOST:PORT`.
function startServer() {
  const child = spawn(kvgate, ['serve', '--host', '127.0.0.1', '--port', '0', ...serveFlags], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const address = new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('server did not start within 60 s')), 60000);
    child.stdout.on('data', (data) => {
      out += data.toString();
      const match = out.match(/^listening on (\S+)\n/);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited early with ${code}; stdout: ${out}`));
    });
  });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return { child, address, exited };
}

const server = startServer();
let failed = false;
try {
  const address = await server.address;
  const client = new OpenAI({
    baseURL: `http://${address}/v1`,
    apiKey: 'not-needed',
    maxRetries: 0,
    timeout: 60000,
  });

  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  const model = models.data[0].id;

  const request = { model, prompt: 'The pass key is', max_tokens: 12, temperature: 0 };
  const completion = await client.completions.create(request);
  assert.equal(completion.object, 'text_completion');
  assert.equal(typeof completion.choices[0].text, 'string');
  assert.ok(['stop', 'length'].includes(completion.choices[0].finish_reason));
  assert.ok(completion.usage.prompt_tokens > 0);
  assert.ok(completion.usage.completion_tokens >= 1 && completion.usage.completion_tokens <= 12);
  assert.equal(completion.usage.total_tokens,
               completion.usage.prompt_tokens + completion.usage.completion_tokens);

  const stream = await client.completions.create({
    ...request,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  let finishReason = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += choice.text;
      if (choice.finish_reason) finishReason = choice.finish_reason;
    }
  }
  assert.ok(chunks >= 2, `expected several chunks, got ${chunks}`);
  // Greedy decoding is deterministic: the stream spells the same text.
  assert.equal(text, completion.choices[0].text);
  assert.equal(finishReason, completion.choices[0].finish_reason);
  assert.deepEqual(usage, completion.usage);

  // GET /v1/models/{id}: the model itself, and a NotFoundError for any other id.
  const retrieved = await client.models.retrieve(model);
  assert.equal(retrieved.id, model);
  assert.equal(retrieved.object, 'model');
  await assert.rejects(client.models.retrieve('no-such-model'),
                       (error) => error instanceof APIError && error.status === 404);

  // Chat: the user message is the prompt (the built-in template drops system messages), so
  // greedy decoding gives the completion's text again, plain and streamed.
  const chatRequest = {
    model,
    messages: [{ role: 'system', content: 'Answer with the pass key only.' },
               { role: 'user', content: request.prompt }],
    max_tokens: request.max_tokens,
    temperature: 0,
  };
  const chat = await client.chat.completions.create(chatRequest);
  assert.equal(chat.object, 'chat.completion');
  assert.equal(chat.choices[0].message.role, 'assistant');
  assert.equal(chat.choices[0].message.content, completion.choices[0].text);
  assert.deepEqual(chat.usage, completion.usage);
  const chatStream = await client.chat.completions.create({
    ...chatRequest,
    stream: true,
    stream_options: { include_usage: true },
  });
  let chatText = '';
  let chatUsage = null;
  let role = null;
  for await (const chunk of chatStream) {
    if (chunk.usage) chatUsage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.delta.role) role = choice.delta.role;
      chatText += choice.delta.content ?? '';
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(chatText, completion.choices[0].text);
  assert.deepEqual(chatUsage, completion.usage);
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: 'system', content: 'x' }] }),
    (error) => error instanceof APIError && error.status === 400,
  );

  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: 0 }),
    (error) => error instanceof APIError && error.status === 400 &&
               error.error?.code === 'invalid_max_tokens',
  );
  console.log(`OK: ${JSON.stringify(completion.choices[0].text)} (${chunks} chunks streamed; chat ` +
              'plain and streamed agree)');
} catch (error) {
  failed = true;
  console.error('FAIL:', error);
} finally {
  server.child.kill('SIGTERM');
  const { code, signal } = await server.exited;
  if (code !== 0) {
    failed = true;
    console.error(`FAIL: server exited with code ${code} (signal ${signal}) after SIGTERM`);
  }
}
process.exit(failed ? 1 : 0);
