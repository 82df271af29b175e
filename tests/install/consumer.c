/* A program outside the tree that uses an installed ortep. */
#include <ortep/ortep.h>
#include <stdio.h>

int main(void) {
  ortep_allocator *host;
  if (ortep_host_allocator_create(NULL, &host) != ORTEP_OK) return 1;
  ortep_arena *arena;
  if (ortep_arena_create(host, NULL, &arena) != ORTEP_OK) return 1;
  void *p;
  if (ortep_arena_alloc(arena, 100, 64, &p) != ORTEP_OK) return 1;
  ortep_arena_destroy(arena);
  ortep_allocator_destroy(host);
  printf("ortep %s ok\n", ortep_version());
  return 0;
}
