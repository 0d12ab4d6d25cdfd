package clusterpb

// Version is the envelope version this build speaks. A node answers an
// envelope of a higher version with an UNSUPPORTED error; a change that an
// older node could misread raises it.
const Version = 1
