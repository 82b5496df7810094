/* Start-up code for a Cortex-M4 (QEMU's mps2-an386 board), for programs that use a relay_aot
 * standalone package: the vector table, copying .data from flash to RAM, zeroing .bss, turning
 * the FPU on (the package is built for the hard-float ABI), then main() and exit() through
 * newlib's semihosting library (rdimon), which also carries printf's output to the host. */
#include <stdint.h>
#include <stdlib.h>

extern uint32_t __data_load__, __data_start__, __data_end__, __bss_start__, __bss_end__, __stack_top__;
extern int main(void);
extern void initialise_monitor_handles(void);

void Reset_Handler(void);

static void Fault_Handler(void) {
  exit(70); /* a fault is a failed run, reported to the host as a non-zero exit */
}

__attribute__((section(".vectors"), used)) static void (*const vectors[16])(void) = {
    (void (*)(void))&__stack_top__, Reset_Handler, Fault_Handler, Fault_Handler, Fault_Handler,
    Fault_Handler, Fault_Handler, 0, 0, 0, 0, Fault_Handler, Fault_Handler, 0, Fault_Handler, Fault_Handler,
};

void Reset_Handler(void) {
  uint32_t* src = &__data_load__;
  for (uint32_t* dst = &__data_start__; dst < &__data_end__;) *dst++ = *src++;
  for (uint32_t* dst = &__bss_start__; dst < &__bss_end__;) *dst++ = 0;
  /* CPACR: full access to coprocessors 10 and 11 (the FPU) */
  *(volatile uint32_t*)0xE000ED88 |= (0xFu << 20);
  __asm volatile("dsb\n isb");
  initialise_monitor_handles();
  exit(main());
}
