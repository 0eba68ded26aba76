// The Vercel AI SDK (`ai` + `@ai-sdk/openai`) running a tool-using task against a Responses API
// server, as an application would: the provider's Responses model, real tools over a sample
// repository, and the SDK's own multi-step loop. tools/check_real_clients.py runs it.
//
//   node vercel.mjs --base-url http://127.0.0.1:PORT/v1 --api-key KEY --repo DIR --mode MODE
//
// MODE is `generate` (generateText: JSON), `stream` (streamText: SSE) or `compaction`
// (streamText with the provider's `contextManagement`: the server compacts a long input inside
// the response, and the SDK sends the compaction item back with the rest of the history).
// Then one follow-up continues the last answer by its id (the provider's `previousResponseId`),
// as a chat application does. Prints one JSON line: per step its response id, tool calls, input
// tokens (cached among them) and whether it compacted; the final text; the follow-up's id and
// answer. Exit status 1 (with the error on stderr) when the SDK throws.

import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, resolve, sep } from 'node:path';
import { parseArgs } from 'node:util';

import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

const MODES = ['generate', 'stream', 'compaction'];
const { values: args } = parseArgs({
  options: {
    'base-url': { type: 'string' },
    'api-key': { type: 'string', default: 'sk-local' },
    repo: { type: 'string' },
    mode: { type: 'string', default: 'generate' },
    model: { type: 'string', default: 'labkit-spark' },
    'compact-threshold': { type: 'string', default: '1000' },
  },
});
if (!args['base-url'] || !args.repo || !MODES.includes(args.mode)) {
  console.error(`usage: node vercel.mjs --base-url URL --repo DIR [--api-key KEY] [--mode ${MODES.join('|')}]`);
  process.exit(2);
}
const root = resolve(args.repo);
const sources = readdirSync(join(root, 'tally')).filter((n) => n.endsWith('.py')).sort().map((n) => `tally/${n}`);

// A path inside the repository, or null: the model picks the path, so it is checked.
function inside(path) {
  const full = resolve(root, String(path ?? '.'));
  return full === root || full.startsWith(root + sep) ? full : null;
}

const tools = {
  list_files: tool({
    description: 'List the files and folders of a folder of the repository.',
    inputSchema: z.object({ folder: z.string().describe('a folder, relative to the repository') }),
    execute: async ({ folder }) => {
      const full = inside(folder);
      if (!full) return 'outside the repository';
      try {
        return readdirSync(full).map((n) => (statSync(join(full, n)).isDirectory() ? n + '/' : n)).join('\n');
      } catch {
        return `no such folder: ${folder}; the repository's top level: ${readdirSync(root).join(', ')}`;
      }
    },
  }),
  read_file: tool({
    description: 'Read a source file of the repository.',
    inputSchema: z.object({ path: z.enum(sources).describe('a file, relative to the repository') }),
    execute: async ({ path }) => {
      const full = inside(path);
      return full ? readFileSync(full, 'utf8').slice(0, 8000) : 'outside the repository';
    },
  }),
};

const openai = createOpenAI({ baseURL: args['base-url'], apiKey: args['api-key'] });
// one conversation, one cache key, as agents send: the server routes its turns to one replica
const options = { promptCacheKey: `vercel-check-${args.mode}` };
if (args.mode === 'compaction') {
  options.contextManagement = [{ type: 'compaction', compactThreshold: Number(args['compact-threshold']) }];
}
const request = {
  model: openai.responses(args.model),
  instructions: 'You are a coding assistant. Use the tools to look at the repository before answering.',
  prompt: 'Which module of this repository computes tax, and what does its main function return?',
  tools,
  stopWhen: stepCountIs(12),
  providerOptions: { openai: options },
  maxRetries: 0,
  timeout: 60_000,
};

try {
  let steps;
  let text;
  if (args.mode === 'generate') {
    ({ steps, text } = await generateText(request));
  } else {
    let streamError = null;
    const result = streamText({ ...request, onError: ({ error }) => { streamError = error; } });
    for await (const _ of result.textStream); // drain: the loop runs as the stream is read
    if (streamError) throw streamError;
    steps = await result.steps;
    text = await result.text;
  }
  const last = steps.at(-1);
  const followUp = await generateText({
    model: request.model,
    prompt: 'Now say it in one sentence.',
    providerOptions: { openai: { ...options, previousResponseId: last.response.id } },
    maxRetries: 0,
    timeout: 60_000,
  });
  console.log(JSON.stringify({
    mode: args.mode,
    steps: steps.map((s) => ({
      response_id: s.response.id,
      tool_calls: s.toolCalls.map((c) => c.toolName),
      input_tokens: s.usage.inputTokens ?? null,
      cached_tokens: s.usage.inputTokenDetails?.cacheReadTokens ?? null,
      compacted: s.content.some((c) => c.type === 'custom' && c.kind === 'openai.compaction'),
    })),
    finish_reason: last.finishReason,
    text,
    follow_up: { response_id: followUp.response.id, text: followUp.text },
  }));
} catch (error) {
  console.error(`${error.name}: ${error.message}`);
  if (error.responseBody) console.error(`response body: ${String(error.responseBody).slice(0, 2000)}`);
  process.exit(1);
}
