// How the pipelines page draws a run it has no spec for (one started from
// another browser or client): stages guessed from the stored steps' timing.
// A plain node test of the page's module (ui/pipelines.js), no browser.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { stagesFromSteps, stagesOf } from '../../ui/pipelines.js';

const step = (name, started_at, finished_at, round = 1) => ({ name, round, started_at, finished_at, status: 'done' });

test('a for_each stage is one column for its agent', () => {
  assert.deepEqual(stagesOf({ agents: [], stages: ['planner', { for_each: 'agents.planner.output.steps', agent: 'ex' }, 'sum'] }),
    [{ agent: 'planner' }, { for_each: 'agents.planner.output.steps', agent: 'ex' }, { agent: 'sum' }]);
});

test('a chain, a fan-out and rounds are drawn from step times', () => {
  assert.deepEqual(stagesFromSteps([step('a', 10, 11), step('b', 11, 12), step('c', 12, 13)]),
    [{ agent: 'a' }, { agent: 'b' }, { agent: 'c' }]);
  // planner, then four executors submitted together, then a summarizer.
  const fan = [step('planner', 10, 11), step('food', 11, 12.5), step('games', 11, 12.2), step('travel', 11.01, 12.4),
    step('safety', 11.01, 12.1), step('summarizer', 12.5, 13)];
  assert.deepEqual(stagesFromSteps(fan), stagesOf({
    agents: [], stages: ['planner', { parallel: ['food', 'games', 'travel', 'safety'] }, 'summarizer'],
  }));
  // A critic repeated for three rounds after a writer; an agent not started yet comes last.
  const rounds = [step('writer', 1, 2), step('critic', 2, 3), step('critic', 3, 4, 2), step('critic', 4, 5, 3),
    { name: 'late', round: 1, status: 'pending' }];
  assert.deepEqual(stagesFromSteps(rounds),
    [{ agent: 'writer' }, { rounds: [{ agent: 'critic' }, { agent: 'late' }], max_rounds: 3, ran: true }]);
});
